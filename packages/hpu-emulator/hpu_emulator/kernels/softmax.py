"""The bridge's masked softmax kernels: ``hpu::scaled_masked_softmax``,
``scaled_masked_triangular_softmax``, ``scaled_triangular_softmax`` and its ``_retain`` form.

Schemas and checks of the bridge (``eager_custom_op_register.cpp``,
``hpu_ops/backend/scaled_masked_softmax.cpp``, ``scaled_triangular_softmax.cpp``); values of
its op tests (``test_hpu_scaled_masked_softmax.py``, ``..._triangular_softmax.py``):

- ``scaled_masked_softmax(input, mask, scale)``: ``softmax(input * scale + mask, -1)``.
- ``scaled_masked_triangular_softmax(self [B, S, K], start_end, inv_scale_attn,
  grouped_batch_size, use_max, mode, out_dtype=None)``: ``softmax(self * inv_scale_attn)``
  over the last dim where each group of ``grouped_batch_size`` batch rows sees only the keys
  ``start <= k < end`` of its ``(start, end)`` pair in ``start_end`` (flattened), and, when
  ``S == K``, a query ``q`` only the keys ``k <= q`` (``S == 1`` is the next token: every key
  up to ``end``). A row that sees no key is zeros, as the kernel leaves it. ``out_dtype``
  is the input's, or float8 for a bfloat16 input. ``use_max`` and ``mode`` (the exponent's
  lookup-table variant) steer the hardware's arithmetic only: computed exactly here.
- ``scaled_triangular_softmax(self [B, S, K], inv_scale_attn, exp_sum_recpr=None, max=None)``:
  the lower-triangular softmax (``k <= q``); with the two statistics of
  ``scaled_triangular_softmax_retain`` it applies them instead of computing its own, so the
  pair gives the same values bit for bit. ``_retain`` returns the softmax, the reciprocal of
  each row's sum of exponents (float32) and each row's maximum (input dtype), ``[B, S, 1]``.

- ``custom_softmax(input, flavor)`` (``hpex.kernels.CustomSoftmax``, its op test
  ``test_custom_softmax.py``): the softmax over the last dim; ``flavor`` 1 asks hardware for
  a cheaper exponent, computed exactly here as 0 is.

Computed in float32, rounded once to the output dtype.
"""

from __future__ import annotations

import torch

from hpu_emulator.kernels.checks import expect

FP8 = (torch.float8_e5m2, torch.float8_e4m3fn)


def scaled_masked_softmax(input: torch.Tensor, mask: torch.Tensor, scale: float
                          ) -> torch.Tensor:
    value = input.float() * scale + mask.float()
    return torch.softmax(value, -1).to(input.dtype)


def custom_softmax(input: torch.Tensor, flavor: int) -> torch.Tensor:
    expect(flavor in (0, 1), f"custom_softmax: flavor must be 0 or 1, got {flavor}")
    return torch.softmax(input.float(), -1).to(input.dtype)


def _masked_softmax(scores: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim of the visible scores; rows with none visible are zeros."""
    masked = scores.masked_fill(~visible, float("-inf"))
    peak = masked.amax(-1, keepdim=True)
    peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    exps = torch.exp(masked - peak)
    total = exps.sum(-1, keepdim=True)
    return torch.where(total > 0, exps / total.clamp_min(torch.finfo(torch.float32).tiny),
                       torch.zeros_like(exps))


def scaled_masked_triangular_softmax(self: torch.Tensor, start_end: torch.Tensor,
                                     inv_scale_attn: float, grouped_batch_size: int,
                                     use_max: bool, mode: int,
                                     out_dtype: torch.dtype | None = None) -> torch.Tensor:
    out_dtype = out_dtype or self.dtype
    expect(out_dtype == self.dtype or (self.dtype == torch.bfloat16 and out_dtype in FP8),
           "Input and output dtypes must be equal or input must be bfloat16 and output must "
           f"be fp8. Got: input = {self.dtype}, output = {out_dtype}")
    expect(self.dim() == 3, "Input must be a 3D tensor.")
    batch, queries, keys = self.shape
    expect(queries in (keys, 1), "Dim1 must equal (dim2 or 1)")
    expect(grouped_batch_size > 0, "grouped_batch_size must be larger than 0.")
    expect(batch % grouped_batch_size == 0, "dim0 must be a multiple of grouped_batch_size.")
    groups = batch // grouped_batch_size
    bounds = start_end.reshape(-1).to(device=self.device, dtype=torch.int64)
    expect(bounds.numel() >= 2 * groups,
           f"scaled_masked_triangular_softmax: start_end has {bounds.numel()} values, "
           f"{groups} groups need a (start, end) pair each")
    pairs = bounds[: 2 * groups].view(groups, 2).repeat_interleave(grouped_batch_size, 0)
    key = torch.arange(keys, device=self.device)
    visible = (key >= pairs[:, :1]) & (key < pairs[:, 1:])  # [B, K]
    visible = visible[:, None, :].expand(batch, queries, keys)
    if queries == keys and queries > 1:
        query = torch.arange(queries, device=self.device)
        visible = visible & (key[None, :] <= query[:, None])
    probs = _masked_softmax(self.float() * inv_scale_attn, visible)
    return probs.to(out_dtype)


def _triangular_stats(self: torch.Tensor, inv_scale_attn: float
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(scaled scores, row maximum, reciprocal of the row sum), all float32."""
    expect(self.dim() == 3, "Self tensor must be 3D.")
    queries, keys = self.shape[1], self.shape[2]
    scores = self.float() * inv_scale_attn
    visible = torch.ones(queries, keys, dtype=torch.bool, device=self.device).tril()
    scores = scores.masked_fill(~visible, float("-inf"))
    peak = scores.amax(-1, keepdim=True)
    return scores, peak, 1.0 / torch.exp(scores - peak).sum(-1, keepdim=True)


def scaled_triangular_softmax(self: torch.Tensor, inv_scale_attn: float,
                              exp_sum_recpr: torch.Tensor | None = None,
                              max: torch.Tensor | None = None) -> torch.Tensor:
    expect((exp_sum_recpr is None) == (max is None),
           "Inputs max and exp_sum_recpr must be both given or Null.")
    scores, peak, recpr = _triangular_stats(self, inv_scale_attn)
    if exp_sum_recpr is not None and max is not None:
        expect(exp_sum_recpr.shape == max.shape,
               "exp_sum_recpr and max inputs must have the same shape.")
        expect(list(exp_sum_recpr.shape) == [*self.shape[:-1], 1],
               "exp_sum_recpr and max inputs must have shape [self_shape[0], self_shape[1], 1].")
        peak, recpr = max.float(), exp_sum_recpr.float()
    return (torch.exp(scores - peak) * recpr).to(self.dtype)


def scaled_triangular_softmax_retain(self: torch.Tensor, inv_scale_attn: float
                                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    scores, peak, _ = _triangular_stats(self, inv_scale_attn)
    # the maximum is kept in the input's dtype and the sum taken with that rounded value, so
    # scaled_triangular_softmax given these statistics repeats the softmax exactly
    peak = peak.to(self.dtype)
    exps = torch.exp(scores - peak.float())
    recpr = 1.0 / exps.sum(-1, keepdim=True)
    return (exps * recpr).to(self.dtype), recpr, peak
