"""``hpu::rotary_pos_embedding`` and its backward.

Schema as the bridge declares it (``eager_custom_op_register.cpp``):
``rotary_pos_embedding(Tensor input, Tensor sin, Tensor cos, Tensor? position_ids,
int offset, int mode) -> Tensor`` (note: sin before cos). Modes as
``hpex.kernels.RotaryPosEmbeddingMode``: 0 = BLOCKWISE (``rotate_half``: the two halves of
the last dim, GPT-NeoX/LLaMA), 1 = PAIRWISE (``rotate_every_two``: neighbouring elements,
GPT-J/ChatGLM). The formulas are the ones the bridge documents in
``RotaryPosEmbeddingHelper.apply_rotary_pos_emb``: ``out = x * cos + rotate(x) * sin``.

Which cos/sin rows apply: with ``position_ids`` (``[batch, seq]``, how optimum-habana calls
it with a ``[1, 1, max_positions, dim]`` table), row ``position_ids[b, l]`` for query
``[b, :, l]`` (Transformers' ``cos[position_ids].unsqueeze(1)``); without, ``offset`` picks
where the values start on the table's last dim, ``cos[..., offset:offset + D]`` for an input
whose last dim is ``D`` (the bridge's own reference, ``apply_rotary_pos_emb_v1_ref`` in its
``test_hpu_rotary_pos_embedding_helper.py``, whose tables carry ``offset`` leading columns),
and the table broadcasts against the input. A table longer than the input's sequence (dim
``-2``) is cut to it from its start; the bridge's sources do not say what it does there.

The backward is the transpose of that linear map: ``g * cos - rotate(g * sin)``.
"""

from __future__ import annotations

import torch

from hpu_emulator.kernels.checks import expect, expect_float

BLOCKWISE = 0
PAIRWISE = 1


def _rotate(x: torch.Tensor, mode: int) -> torch.Tensor:
    if mode == BLOCKWISE:
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    pairs = x.unflatten(-1, (-1, 2))
    return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)


def _table(x: torch.Tensor, table: torch.Tensor, position_ids: torch.Tensor | None,
           offset: int) -> torch.Tensor:
    if position_ids is not None:
        rows = table.reshape(-1, table.shape[-1])
        picked = rows[position_ids.to(device=rows.device, dtype=torch.int64)]
        return picked.unsqueeze(1) if x.dim() == 4 and picked.dim() == 3 else picked
    table = table[..., offset:offset + x.shape[-1]]
    if table.dim() >= 2 and x.dim() >= 2 and table.shape[-2] > x.shape[-2] > 1:
        table = table.narrow(-2, 0, x.shape[-2])
    return table


def _check(op: str, x: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor, offset: int,
           mode: int) -> None:
    expect_float(op, "input", x)
    expect(mode in (BLOCKWISE, PAIRWISE),
           f"{op}: mode must be 0 (BLOCKWISE) or 1 (PAIRWISE), got {mode}")
    expect(x.shape[-1] % 2 == 0, f"{op}: the last dim of input must be even, got {x.shape[-1]}")
    expect(sin.shape == cos.shape,
           f"{op}: sin and cos must have one shape, got {list(sin.shape)} and {list(cos.shape)}")
    expect(offset >= 0, f"{op}: offset must be >= 0, got {offset}")
    expect(cos.shape[-1] == x.shape[-1] or (offset > 0 and cos.shape[-1] >= offset + x.shape[-1]),
           f"{op}: cos/sin last dim ({cos.shape[-1]}) must equal input's ({x.shape[-1]}), "
           f"or hold offset + that ({offset + x.shape[-1]}) when offset is given")


def rotary_pos_embedding(input: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor,
                         position_ids: torch.Tensor | None, offset: int, mode: int
                         ) -> torch.Tensor:
    _check("rotary_pos_embedding", input, sin, cos, offset, mode)
    c = _table(input, cos, position_ids, offset).float()
    s = _table(input, sin, position_ids, offset).float()
    x = input.float()
    return (x * c + _rotate(x, mode) * s).to(input.dtype)


def rotary_pos_embedding_backward(grad_in: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor,
                                  position_ids: torch.Tensor | None, offset: int, mode: int
                                  ) -> torch.Tensor:
    _check("rotary_pos_embedding_backward", grad_in, sin, cos, offset, mode)
    c = _table(grad_in, cos, position_ids, offset).float()
    s = _table(grad_in, sin, position_ids, offset).float()
    g = grad_in.float()
    return (g * c - _rotate(g * s, mode)).to(grad_in.dtype)
