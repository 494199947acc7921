"""Stand-in for ``habana_frameworks.torch.hpex.kernels``: the names the bridge exports that
code written for Gaudi uses (FusedSDPA and its fp8 form, the rotary-embedding helpers, CTCLoss,
CustomSoftmax)."""

from .CTCLoss import CTCLoss
from .CustomSoftmax import CustomSoftmax
from .Fp8FusedSDPA import (
    fp8_fused_sdpa,
    fp8_sdpa_bwd_wrapper,
    fp8_sdpa_fwd_wrapper,
    gqa_output_reshape,
)
from .FusedSDPA import FusedSDPA, is_gqa
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
    "fp8_fused_sdpa",
    "fp8_sdpa_bwd_wrapper",
    "fp8_sdpa_fwd_wrapper",
    "gqa_output_reshape",
    "is_gqa",
]
