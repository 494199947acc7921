"""Stand-in for ``habana_frameworks.torch.low_overhead_profiler``."""
