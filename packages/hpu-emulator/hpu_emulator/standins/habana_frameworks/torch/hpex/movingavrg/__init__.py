"""Stand-in for ``habana_frameworks.torch.hpex.movingavrg``: the fused moving average of a
model's weights."""

from .FusedEMA import FusedEMA

__all__ = ["FusedEMA"]
