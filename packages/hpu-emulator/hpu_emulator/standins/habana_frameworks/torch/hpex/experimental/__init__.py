"""Stand-in for ``habana_frameworks.torch.hpex.experimental``."""
