"""Stand-in for ``habana_frameworks.torch.hpex.optimizers``: the fused optimizers that
optimum-habana (``GaudiConfig.use_fused_adam``) and Gaudi model code construct."""

from .FusedAdamW import FusedAdamW
from .FusedSGD import FusedSGD

__all__ = ["FusedAdamW", "FusedSGD"]
