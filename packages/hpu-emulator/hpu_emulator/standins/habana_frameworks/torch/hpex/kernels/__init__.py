"""Stand-in for ``habana_frameworks.torch.hpex.kernels``: the names the bridge exports that
code written for Gaudi uses (FusedSDPA, the rotary-embedding helpers, CTCLoss, CustomSoftmax)."""

from .CTCLoss import CTCLoss
from .CustomSoftmax import CustomSoftmax
from .FusedSDPA import FusedSDPA, gqa_output_reshape, is_gqa
from .RotaryPosEmbeddingHelper import (
    RotaryPosEmbeddingHelperV1,
    RotaryPosEmbeddingHelperV2,
    RotaryPosEmbeddingHelperV3,
    RotaryPosEmbeddingMode,
    apply_rotary_pos_emb,
    apply_rotary_pos_emb_bwd,
)

__all__ = [
    "CTCLoss",
    "CustomSoftmax",
    "FusedSDPA",
    "RotaryPosEmbeddingHelperV1",
    "RotaryPosEmbeddingHelperV2",
    "RotaryPosEmbeddingHelperV3",
    "RotaryPosEmbeddingMode",
    "apply_rotary_pos_emb",
    "apply_rotary_pos_emb_bwd",
    "gqa_output_reshape",
    "is_gqa",
]
