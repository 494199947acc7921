"""Stand-in for ``habana_frameworks.torch.hpex.kernels.FusedSDPA``.

``FusedSDPA.apply(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
softmax_mode="None", recompute_mode=None, valid_seq_len=None, seq_padding_type="left",
return_dropout_mask=False, return_attn_probs=False)``, positional as the bridge's autograd
function takes them. It checks what the bridge checks, with its assertion messages, reshapes
grouped-query attention to ``[B, groups, heads per group, L, D]`` as the bridge does, and
calls ``torch.ops.hpu.sdpa_recomp_fwd``/``sdpa_fwd`` and their backward ops. The recompute
variant is chosen by ``recompute_mode``, or when None by ``torch.hpu.recompute_sdp_enabled()``
(on by default; ``torch.hpu.sdp_kernel(enable_recompute=False)`` turns it off).
"""

from __future__ import annotations

import math
from typing import Any

import habana_frameworks.torch.hpu as ht
import torch


def is_gqa(q: torch.Tensor, k: torch.Tensor) -> bool:
    """Grouped-query attention: 4-D inputs whose key heads are fewer than, but more than one."""
    return q.dim() == 4 and q.shape[1] != k.shape[1] and k.shape[1] != 1


def _group(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    batch, heads, length, _ = q.shape
    groups = k.shape[1]
    q = q.reshape(batch, groups, heads // groups, length, q.shape[-1])
    k = k.reshape(k.shape[0], groups, 1, k.shape[2], k.shape[3])
    v = v.reshape(v.shape[0], groups, 1, v.shape[2], v.shape[3])
    if mask is not None:
        if mask.shape[1] == heads:
            mask = mask.reshape(mask.shape[0], groups, heads // groups, *mask.shape[2:])
        else:
            mask = mask.unsqueeze(1)
    return q, k, v, mask


def gqa_output_reshape(tensor: torch.Tensor) -> torch.Tensor:
    """``[B, groups, heads per group, L, D]`` back to ``[B, heads, L, D]``."""
    batch, groups, per_group, length, dim = tensor.shape
    return tensor.reshape(batch, groups * per_group, length, dim)


def _ungroup_like(q5: torch.Tensor, v5: torch.Tensor, tensor: torch.Tensor) -> torch.Tensor:
    return tensor.reshape(q5.shape[0], q5.shape[1], q5.shape[2], q5.shape[3], v5.shape[-1])


def _checks(requires_backward: bool, recompute: bool, softmax_mode: str, is_causal: bool,
            attn_mask: torch.Tensor | None, valid_seq_len: torch.Tensor | None,
            return_dropout_mask: bool, return_attn_probs: bool) -> None:
    if return_attn_probs:
        assert not requires_backward, "return_attn_probs is supported only for inference mode"
    if recompute and requires_backward and softmax_mode == "fast":
        assert is_causal, (
            "Optimized softmax mode is supported in recompute training mode only in "
            "causal(triangular) mask case"
        )
    if valid_seq_len is not None:
        assert is_causal and not requires_backward and attn_mask is None, (
            "Valid sequence length is supported only in inference with is_causal(triangular) "
            "mask case"
        )
    if recompute:
        assert not return_dropout_mask, "Return_dropout_mask is not supported in recompute mode"


def _inference_outputs(out: torch.Tensor, probs: torch.Tensor, dm: torch.Tensor,
                       gqa: bool, dropout_p: float, return_dropout_mask: bool,
                       return_attn_probs: bool) -> Any:
    if gqa and dropout_p > 0.0:
        dm = gqa_output_reshape(dm)
    if gqa and return_attn_probs:
        probs = gqa_output_reshape(probs)
    extra = ([probs] if return_attn_probs else []) + ([dm] if return_dropout_mask else [])
    return (out, *extra) if extra else out


class FusedSDPA(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                is_causal: bool = False, scale: float | None = None,
                softmax_mode: str = "None", recompute_mode: bool | None = None,
                valid_seq_len: torch.Tensor | None = None, seq_padding_type: str = "left",
                return_dropout_mask: bool = False, return_attn_probs: bool = False) -> Any:
        requires_backward = q.requires_grad or k.requires_grad or v.requires_grad
        softmax_mode = softmax_mode.lower()
        seq_padding_type = seq_padding_type.lower()
        scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
        recompute = ht.recompute_sdp_enabled() if recompute_mode is None else recompute_mode
        if return_attn_probs:
            recompute = False
        _checks(requires_backward, recompute, softmax_mode, is_causal, attn_mask, valid_seq_len,
                return_dropout_mask, return_attn_probs)
        gqa = is_gqa(q, k)
        if gqa:
            q, k, v, attn_mask = _group(q, k, v, attn_mask)
        ctx.dropout_p, ctx.scale, ctx.is_causal = dropout_p, scale, is_causal
        ctx.recompute, ctx.gqa, ctx.softmax_mode = recompute, gqa, softmax_mode
        if recompute:
            out, m, linv, seed = torch.ops.hpu.sdpa_recomp_fwd(
                q, k, v, attn_mask, dropout_p, scale, is_causal, requires_backward,
                softmax_mode, valid_seq_len, seq_padding_type)
            out = gqa_output_reshape(out) if gqa else out
            if requires_backward:
                ctx.save_for_backward(q, k, v, attn_mask, m, linv, seed, out)
            return out
        out, probs, dm = torch.ops.hpu.sdpa_fwd(
            q, k, v, attn_mask, dropout_p, scale, is_causal, softmax_mode, valid_seq_len,
            seq_padding_type)
        out = gqa_output_reshape(out) if gqa else out
        if not requires_backward:
            return _inference_outputs(out, probs, dm, gqa, dropout_p, return_dropout_mask,
                                      return_attn_probs)
        ctx.save_for_backward(q, k, v, probs, dm, out)
        if return_dropout_mask:
            return out, (gqa_output_reshape(dm) if gqa and dropout_p > 0.0 else dm)
        return out

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor, *unused: Any) -> tuple[Any, ...]:
        if ctx.recompute:
            q, k, v, attn_mask, m, linv, seed, fwd_out = ctx.saved_tensors
        else:
            q, k, v, probs, dm, fwd_out = ctx.saved_tensors
        if ctx.gqa:
            dout, fwd_out = _ungroup_like(q, v, dout), _ungroup_like(q, v, fwd_out)
        if ctx.recompute:
            dq, dk, dv = torch.ops.hpu.sdpa_recomp_bwd(
                dout, q, k, v, attn_mask, m, linv, seed, ctx.is_causal, ctx.dropout_p,
                ctx.scale, ctx.softmax_mode, fwd_out)
        else:
            dq, dk, dv = torch.ops.hpu.sdpa_bwd(
                dout, q, k, v, probs, dm, ctx.is_causal, ctx.dropout_p, ctx.scale, fwd_out)
        if ctx.gqa:
            dq, dk, dv = gqa_output_reshape(dq), gqa_output_reshape(dk), gqa_output_reshape(dv)
        return (dq, dk, dv) + (None,) * 10
