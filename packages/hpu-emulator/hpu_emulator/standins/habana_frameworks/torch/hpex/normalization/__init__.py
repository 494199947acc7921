"""Stand-in for ``habana_frameworks.torch.hpex.normalization``."""

from .FusedClipNorm import FusedClipNorm
from .FusedRMSNorm import FusedRMSNorm, RmsNormBwdMode

__all__ = ["FusedClipNorm", "FusedRMSNorm", "RmsNormBwdMode"]
