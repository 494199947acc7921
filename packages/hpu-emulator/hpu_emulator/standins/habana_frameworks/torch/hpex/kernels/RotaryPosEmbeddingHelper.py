"""Stand-in for ``habana_frameworks.torch.hpex.kernels.RotaryPosEmbeddingHelper``.

``apply_rotary_pos_emb(p, cos, sin, position_ids=None, offset=0, mode=BLOCKWISE)`` (or
``apply_rotary_pos_emb(p, rope_cache)`` for ChatGLM's combined cache) calls
``torch.ops.hpu.rotary_pos_embedding``; the autograd helpers V1 (offset, GPT-NeoX up to
Transformers 4.27), V2 (position ids, later Transformers, what optimum-habana uses as
``FusedRoPE``) and V3 (ChatGLM's ``rope_cache``) pair it with the backward op. Dtypes are
matched as the bridge matches them: everything float32 if any of input, cos, sin is,
else cos and sin in the input's dtype.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import torch


class RotaryPosEmbeddingMode(Enum):
    BLOCKWISE = 0
    PAIRWISE = 1


def match_data_types(p: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if torch.float32 in (p.dtype, cos.dtype, sin.dtype):
        return p.float(), cos.float(), sin.float()
    return p, cos.to(p.dtype), sin.to(p.dtype)


def apply_rotary_pos_emb(p: torch.Tensor, *args: Any) -> torch.Tensor:
    if len(args) == 1:
        return RotaryPosEmbeddingHelperV3.apply(p, args[0])
    cos, sin = args[0], args[1]
    position_ids = args[2] if len(args) > 2 else None
    offset = args[3] if len(args) > 3 else 0
    mode = args[4] if len(args) > 4 else RotaryPosEmbeddingMode.BLOCKWISE
    p, cos, sin = match_data_types(p, cos, sin)
    return torch.ops.hpu.rotary_pos_embedding(p, sin, cos, position_ids, offset, mode.value)


def apply_rotary_pos_emb_bwd(p_grad_in: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                             position_ids: torch.Tensor | None = None, offset: int = 0,
                             mode: RotaryPosEmbeddingMode = RotaryPosEmbeddingMode.BLOCKWISE
                             ) -> torch.Tensor:
    p_grad_in, cos, sin = match_data_types(p_grad_in, cos, sin)
    return torch.ops.hpu.rotary_pos_embedding_backward(p_grad_in, sin, cos, position_ids,
                                                       offset, mode.value)


class RotaryPosEmbeddingHelperV1(torch.autograd.Function):
    """Offset-based rotary embedding (Transformers' GPT-NeoX up to 4.27, early LLaMA)."""

    @staticmethod
    def forward(ctx: Any, p: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                offset: int) -> torch.Tensor:
        ctx.save_for_backward(cos, sin)
        ctx.offset = offset
        return apply_rotary_pos_emb(p, cos, sin, None, offset, RotaryPosEmbeddingMode.BLOCKWISE)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        cos, sin = ctx.saved_tensors
        return apply_rotary_pos_emb_bwd(grad, cos, sin, None, ctx.offset), None, None, None


class RotaryPosEmbeddingHelperV2(torch.autograd.Function):
    """Position-id-based rotary embedding (Transformers after 4.27)."""

    @staticmethod
    def forward(ctx: Any, p: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                position_ids: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(cos, sin, position_ids)
        return apply_rotary_pos_emb(p, cos, sin, position_ids, 0,
                                    RotaryPosEmbeddingMode.BLOCKWISE)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        cos, sin, position_ids = ctx.saved_tensors
        return apply_rotary_pos_emb_bwd(grad, cos, sin, position_ids), None, None, None


def parse_rope_cache(p: torch.Tensor, rope_cache: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """ChatGLM: ``p`` is ``[seq, batch, heads, dim]``, the cache ``[..., rot_dim/2, 2]``
    of (cos, sin) pairs for the first ``rot_dim`` features; the rest pass through."""
    seq, heads = p.size(0), p.size(2)
    rot_dim = rope_cache.shape[-2] * 2
    rotated, passed = p[..., :rot_dim], p[..., rot_dim:]
    cache = rope_cache[:seq].reshape(seq, -1, 1, rot_dim // 2, 2)
    cos = torch.repeat_interleave(cache[..., 0], 2, dim=-1).to(p.dtype)
    sin = torch.repeat_interleave(cache[..., 1], 2, dim=-1).to(p.dtype)
    return rotated.reshape(seq, -1, heads, rot_dim), passed, sin, cos


class RotaryPosEmbeddingHelperV3(torch.autograd.Function):
    """ChatGLM's rotary embedding over a combined ``rope_cache`` (pairwise)."""

    @staticmethod
    def forward(ctx: Any, p: torch.Tensor, rope_cache: torch.Tensor) -> torch.Tensor:
        rotated, passed, sin, cos = parse_rope_cache(p, rope_cache)
        ctx.save_for_backward(rope_cache)
        out = torch.ops.hpu.rotary_pos_embedding(rotated, sin, cos, None, 0,
                                                 RotaryPosEmbeddingMode.PAIRWISE.value)
        return out if passed.shape[-1] == 0 else torch.cat((out, passed), dim=-1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        (rope_cache,) = ctx.saved_tensors
        rotated, passed, sin, cos = parse_rope_cache(grad, rope_cache)
        back = apply_rotary_pos_emb_bwd(rotated, cos, sin, None, 0,
                                        RotaryPosEmbeddingMode.PAIRWISE)
        return (back if passed.shape[-1] == 0 else torch.cat((back, passed), dim=-1)), None
