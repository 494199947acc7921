"""Stand-in for ``habana_frameworks.torch.hpex.normalization.FusedRMSNorm``.

``FusedRMSNorm.apply(data_in, gamma, eps, use_stages=True, bwd_mode=0, fast_math=False)``:
``torch.ops.hpu.rms_norm`` (``rms_norm_fast`` with ``fast_math``) forward, the matching
backward op for the gradients of ``data_in`` and ``gamma``. ``use_stages`` and ``bwd_mode``
choose hardware kernels and graph slicing on Gaudi; the result is the same.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import torch


class RmsNormBwdMode(Enum):
    DEFAULT = 0
    STATIC_CASE_WIDTH_PARTITIONING = 1


class FusedRMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, data_in: torch.Tensor, gamma: torch.Tensor, eps: float,
                use_stages: bool = True, bwd_mode: int = 0, fast_math: bool = False
                ) -> torch.Tensor:
        op = torch.ops.hpu.rms_norm_fast if fast_math else torch.ops.hpu.rms_norm
        out, inverse_rms = op(data_in, gamma, eps)
        ctx.save_for_backward(inverse_rms, data_in, gamma)
        ctx.use_stages, ctx.bwd_mode, ctx.fast_math = use_stages, bwd_mode, fast_math
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        inverse_rms, data_in, gamma = ctx.saved_tensors
        op = (torch.ops.hpu.rms_norm_fast_backward if ctx.fast_math
              else torch.ops.hpu.rms_norm_backward)
        mode = ctx.bwd_mode.value if isinstance(ctx.bwd_mode, Enum) else ctx.bwd_mode
        grad_x, grad_gamma = op(grad, data_in, gamma, inverse_rms, ctx.use_stages, mode)
        return grad_x, grad_gamma, None, None, None, None
