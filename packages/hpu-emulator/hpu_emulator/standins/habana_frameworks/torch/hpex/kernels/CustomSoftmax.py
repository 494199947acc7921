"""``CustomSoftmax``: the bridge's approximate softmax (bfloat16) over the last dim, as an
autograd function over ``torch.ops.hpu.custom_softmax``; its backward is torch's softmax
backward on the saved result, in bfloat16, as the bridge's."""

from __future__ import annotations

from typing import Any

import torch


class CustomSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, inp: torch.Tensor, flavor: int) -> torch.Tensor:
        """``flavor`` 0 uses the default exponent, 1 a faster approximation on hardware."""
        result = torch.ops.hpu.custom_softmax(inp, flavor)
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor, None]:
        (result,) = ctx.saved_tensors
        grad = torch._softmax_backward_data(grad_output, result, result.dim() - 1,
                                            torch.bfloat16)
        return grad, None
