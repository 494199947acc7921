"""Stand-in for ``habana_frameworks.torch.hpex.kernels.CTCLoss``.

``CTCLoss.apply(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
zero_infinity=False)``: ``torch.ops.hpu.ctc_loss_custom`` forward and
``ctc_loss_custom_backward`` for the gradient of ``log_probs``, as the bridge pairs them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn._reduction import get_enum


class CTCLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, log_probs: torch.Tensor, targets: torch.Tensor,
                input_lengths: torch.Tensor, target_lengths: torch.Tensor, blank: int = 0,
                reduction: str = "mean", zero_infinity: bool = False) -> torch.Tensor:
        ctx.blank, ctx.reduction, ctx.zero_infinity = blank, get_enum(reduction), zero_infinity
        loss, alpha = torch.ops.hpu.ctc_loss_custom(log_probs, targets, input_lengths,
                                                    target_lengths, blank, ctx.reduction,
                                                    zero_infinity)
        ctx.save_for_backward(log_probs, targets, input_lengths, target_lengths, loss, alpha)
        return loss

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        log_probs, targets, input_lengths, target_lengths, loss, alpha = ctx.saved_tensors
        grad_log_probs = torch.ops.hpu.ctc_loss_custom_backward(
            grad, log_probs, targets, input_lengths, target_lengths, loss, alpha, ctx.blank,
            ctx.reduction, ctx.zero_infinity)
        return grad_log_probs, None, None, None, None, None, None
