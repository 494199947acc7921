"""``hpu::rms_norm`` (and ``rms_norm_fast``) with its backward, and ``hpu::fused_clip_norm``.

Schemas and output dtypes as the bridge declares them (``scripts/hpu_op.yaml``, the meta
functions in ``dynamo/_custom_op_meta_registrations.py``):

- ``rms_norm(data_in, gamma, epsilon) -> (out, inverse_rms)``: ``out = x * rsqrt(mean(x^2)
  + eps) * gamma`` over the last dim, ``inverse_rms`` of shape ``[..., 1]``; both in x's
  dtype, float32 when x and gamma differ in dtype. ``hpex.normalization.FusedRMSNorm`` is the
  autograd function over this pair.
- ``fused_clip_norm(grad[], max_norm, norm_type) -> Tensor``: the eager kernel
  (``eager_custom_op_register.cpp``) takes the gradients followed by one placeholder tensor,
  scales the gradients in place so that their total norm is at most ``max_norm``, writes the
  total norm (before clipping) into the placeholder and returns it. The clipping coefficient
  is ``torch.nn.utils.clip_grad_norm_``'s: ``max_norm / (total + 1e-6)``, capped at 1.

Statistics are computed in float32 and rounded once.
"""

from __future__ import annotations

import torch

from hpu_emulator.kernels.checks import expect, expect_float


def rms_norm(data_in: torch.Tensor, gamma: torch.Tensor, epsilon: float
             ) -> tuple[torch.Tensor, torch.Tensor]:
    expect_float("rms_norm", "data_in", data_in)
    expect(gamma.shape[-1:] == data_in.shape[-1:] and gamma.dim() == 1,
           f"rms_norm: gamma must be 1-D of the last dim of data_in ({data_in.shape[-1]}), "
           f"got shape {list(gamma.shape)}")
    dtype = data_in.dtype if data_in.dtype == gamma.dtype else torch.float32
    x = data_in.float()
    inverse_rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + epsilon)
    out = x * inverse_rms * gamma.float()
    return out.to(dtype), inverse_rms.to(dtype)


def rms_norm_backward(grad_in: torch.Tensor, data_in: torch.Tensor, gamma: torch.Tensor,
                      inverse_rms: torch.Tensor, use_stages: bool, bwd_mode: int
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """``use_stages`` and ``bwd_mode`` choose hardware kernels and slicing: same result."""
    x, g, w, inv = data_in.float(), grad_in.float(), gamma.float(), inverse_rms.float()
    normed = x * inv
    weighted = g * w
    grad_x = inv * (weighted - normed * (weighted * normed).mean(dim=-1, keepdim=True))
    grad_gamma = (g * normed).reshape(-1, x.shape[-1]).sum(dim=0)
    return grad_x.to(data_in.dtype), grad_gamma.to(gamma.dtype)


def fused_clip_norm(grad: list[torch.Tensor], max_norm: torch.Tensor, norm_type: float
                    ) -> torch.Tensor:
    expect(len(grad) > 0, "fused_clip_norm : can not process empty grad vector (eager)")
    *grads, total_out = grad
    if not grads:
        total_out.zero_()
        return total_out
    norms = [g.detach().float().norm(norm_type) for g in grads]
    stacked = torch.stack(norms)
    total = stacked.max() if norm_type == float("inf") else stacked.norm(norm_type)
    coefficient = torch.clamp(max_norm.float().reshape(-1)[0] / (total + 1e-6), max=1.0)
    with torch.no_grad():
        for g in grads:
            g.mul_(coefficient.to(g.dtype))
        total_out.copy_(total.reshape(total_out.shape).to(total_out.dtype)
                        if total_out.numel() == 1 else total.to(total_out.dtype))
    return total_out
