"""Stand-in for ``habana_frameworks.torch.dynamo.debug_utils``."""
