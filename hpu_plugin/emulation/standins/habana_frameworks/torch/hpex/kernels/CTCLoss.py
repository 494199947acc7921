"""Stand-in for ``habana_frameworks.torch.hpex.kernels.CTCLoss``: the bridge's CTC loss as an
autograd function (optimum-habana's wav2vec2 calls ``CTCLoss.apply``).

The bridge's forward and backward are its ``ctc_loss_custom`` ops, with the arguments and
reduction of ``torch.nn.functional.ctc_loss``; here both are torch's own CTC loss on the
emulated device (the backward recomputes it, where the bridge keeps the forward's alpha).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.functional import ctc_loss


class CTCLoss(torch.autograd.Function):
    """``CTCLoss.apply(log_probs, targets, input_lengths, target_lengths, blank=0,
    reduction="mean", zero_infinity=False)``; only ``log_probs`` gets a gradient."""

    @staticmethod
    def forward(ctx: Any, log_probs: torch.Tensor, targets: torch.Tensor,
                input_lengths: torch.Tensor, target_lengths: torch.Tensor, blank: int = 0,
                reduction: str = "mean", zero_infinity: bool = False) -> torch.Tensor:
        ctx.save_for_backward(log_probs, targets, input_lengths, target_lengths)
        ctx.options = (blank, reduction, zero_infinity)
        return ctc_loss(log_probs, targets, input_lengths, target_lengths, *ctx.options)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        log_probs, targets, input_lengths, target_lengths = ctx.saved_tensors
        with torch.enable_grad():
            leaf = log_probs.detach().requires_grad_()
            loss = ctc_loss(leaf, targets, input_lengths, target_lengths, *ctx.options)
            (grad_in,) = torch.autograd.grad(loss, leaf, grad)
        return grad_in, None, None, None, None, None, None
