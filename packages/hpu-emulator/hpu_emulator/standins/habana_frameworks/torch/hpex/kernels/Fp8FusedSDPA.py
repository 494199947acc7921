"""Stand-in for ``habana_frameworks.torch.hpex.kernels.Fp8FusedSDPA``.

``fp8_fused_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
softmax_mode="None", d_scale_q=None, d_scale_k=None, d_scale_v=None, q_scale_s=None,
q_scale_o=None, d_scale_s=None, is_amax_s=False, is_amax_o=False, valid_seq_len=None,
seq_padding_type="left", recompute=None)`` returns ``(out, amax_s, amax_o)`` as the bridge's
does: Intel Neural Compressor measures optimum-habana's ``ModuleFusedSDPA`` through it with
bf16 inputs and ``is_amax_s=True``, then runs it with fp8 inputs and their scales. Like the
bridge it checks what the bridge asserts, reshapes grouped-query attention, and calls
``torch.ops.hpu.fp8_sdpa_recomp_fwd`` (recompute, chosen by ``recompute`` or, when None, by
``torch.hpu.recompute_sdp_enabled()``) or ``fp8_sdpa_fwd``; the backward pairs them with the
bf16 backward ops, as the bridge's ``fp8_sdpa_bwd_wrapper`` does. The ops' numerics are in
``hpu_emulator/kernels/fp8_attention.py``.
"""

from __future__ import annotations

import math
from typing import Any

import habana_frameworks.torch.hpu as ht
import torch

from .FusedSDPA import _group, _ungroup_like, gqa_output_reshape, is_gqa

__all__ = ["Fp8FusedSDPA", "fp8_fused_sdpa", "fp8_sdpa_bwd_wrapper", "fp8_sdpa_fwd_wrapper",
           "gqa_output_reshape", "is_gqa"]


def fp8_sdpa_fwd_wrapper(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                         is_causal: bool = False, scale: float | None = None,
                         softmax_mode: str = "None", d_scale_q: Any = None,
                         d_scale_k: Any = None, d_scale_v: Any = None, q_scale_s: Any = None,
                         q_scale_o: Any = None, d_scale_s: Any = None, is_amax_s: bool = False,
                         is_amax_o: bool = False, valid_seq_len: torch.Tensor | None = None,
                         seq_padding_type: str = "left", recompute: bool | None = None
                         ) -> tuple[torch.Tensor, Any, Any]:
    requires_backward = q.requires_grad or k.requires_grad or v.requires_grad
    softmax_mode = softmax_mode.lower()
    seq_padding_type = seq_padding_type.lower()
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    recompute = ht.recompute_sdp_enabled() if recompute is None else recompute
    if requires_backward:
        assert is_causal, "Fp8 FusedSDPA in trining only supports Triangular mask"
    if valid_seq_len is not None:
        assert is_causal and not requires_backward and attn_mask is None, (
            "Valid sequence length is supported only in inference with is_causal(triangular) "
            "mask case"
        )
    gqa = is_gqa(q, k)
    if gqa:
        q, k, v, attn_mask = _group(q, k, v, attn_mask)
    scales = (d_scale_q, d_scale_k, d_scale_v, q_scale_s, q_scale_o, d_scale_s)
    ctx.dropout_p, ctx.scale, ctx.is_causal = dropout_p, scale, is_causal
    ctx.recompute, ctx.gqa, ctx.softmax_mode = recompute, gqa, softmax_mode
    if recompute:
        out, m, linv, seed, amax_s, amax_o = torch.ops.hpu.fp8_sdpa_recomp_fwd(
            q, k, v, attn_mask, dropout_p, scale, is_causal, requires_backward, softmax_mode,
            *scales, is_amax_s, is_amax_o, valid_seq_len, seq_padding_type)
        out = gqa_output_reshape(out) if gqa else out
        if requires_backward:
            ctx.save_for_backward(q, k, v, attn_mask, m, linv, seed, out)
        return out, amax_s, amax_o
    out, probs, dm, amax_s = torch.ops.hpu.fp8_sdpa_fwd(
        q, k, v, attn_mask, dropout_p, scale, is_causal, softmax_mode, *scales, is_amax_s,
        valid_seq_len, seq_padding_type)
    out = gqa_output_reshape(out) if gqa else out
    if requires_backward:
        ctx.save_for_backward(q, k, v, probs, dm, out)
    return out, amax_s, None  # the plain op measures no output amax


def fp8_sdpa_bwd_wrapper(ctx: Any, dout: torch.Tensor, *args: Any) -> tuple[Any, ...]:
    if ctx.recompute:
        q, k, v, attn_mask, m, linv, seed, fwd_out = ctx.saved_tensors
    else:
        q, k, v, probs, dm, fwd_out = ctx.saved_tensors
    if ctx.gqa:
        dout, fwd_out = _ungroup_like(q, v, dout), _ungroup_like(q, v, fwd_out)
    if ctx.recompute:
        dq, dk, dv = torch.ops.hpu.sdpa_recomp_bwd(
            dout, q, k, v, attn_mask, m, linv, seed, ctx.is_causal, ctx.dropout_p, ctx.scale,
            ctx.softmax_mode, fwd_out)
    else:
        dq, dk, dv = torch.ops.hpu.sdpa_bwd(dout, q, k, v, probs, dm, ctx.is_causal,
                                            ctx.dropout_p, ctx.scale, fwd_out)
    if ctx.gqa:
        dq, dk, dv = gqa_output_reshape(dq), gqa_output_reshape(dk), gqa_output_reshape(dv)
    return (dq, dk, dv) + (None,) * 16


class Fp8FusedSDPA(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                is_causal: bool = False, scale: float | None = None,
                softmax_mode: str = "None", d_scale_q: Any = None, d_scale_k: Any = None,
                d_scale_v: Any = None, q_scale_s: Any = None, q_scale_o: Any = None,
                d_scale_s: Any = None, is_amax_s: bool = False, is_amax_o: bool = False,
                valid_seq_len: torch.Tensor | None = None, seq_padding_type: str = "left",
                recompute: bool | None = None) -> tuple[torch.Tensor, Any, Any]:
        return fp8_sdpa_fwd_wrapper(
            ctx, q, k, v, attn_mask, dropout_p, is_causal, scale, softmax_mode, d_scale_q,
            d_scale_k, d_scale_v, q_scale_s, q_scale_o, d_scale_s, is_amax_s, is_amax_o,
            valid_seq_len, seq_padding_type, recompute)

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor, *args: Any) -> tuple[Any, ...]:
        return fp8_sdpa_bwd_wrapper(ctx, dout, *args)


def fp8_fused_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                   is_causal: bool = False, scale: float | None = None,
                   softmax_mode: str = "None", d_scale_q: Any = None, d_scale_k: Any = None,
                   d_scale_v: Any = None, q_scale_s: Any = None, q_scale_o: Any = None,
                   d_scale_s: Any = None, is_amax_s: bool = False, is_amax_o: bool = False,
                   valid_seq_len: torch.Tensor | None = None, seq_padding_type: str = "left",
                   recompute: bool | None = None) -> tuple[torch.Tensor, Any, Any]:
    """``(out, amax_s, amax_o)``: see the module docstring."""
    return Fp8FusedSDPA.apply(q, k, v, attn_mask, dropout_p, is_causal, scale, softmax_mode,
                              d_scale_q, d_scale_k, d_scale_v, q_scale_s, q_scale_o, d_scale_s,
                              is_amax_s, is_amax_o, valid_seq_len, seq_padding_type, recompute)
