"""The bridge's custom ops over whole tensors: ``hpu::kv_reorder`` (and in place),
``in_place_interleave`` (and in place), ``plain_index`` and the ``*_fast_math`` functions.

Schemas of the bridge (``eager_custom_op_register.cpp``, ``scripts/hpu_op.yaml``); values of
its op tests:

- ``kv_reorder_(self, start, end, beam_idx)`` (``test_hpu_kv_reorder.py``): for each batch row
  ``i`` of a beam-search KV cache ``self [B, beams, ..., S, D]``, the positions
  ``start[i] <= s < end[i]`` on dim -2 take the beams that ``beam_idx[i]`` names, in order.
  ``beam_idx`` is uint8 with two bits a beam, the first beam in the highest bits
  (``b0 * 64 + b1 * 16 + b2 * 4 + b3``). ``kv_reorder`` returns a reordered copy.
- ``in_place_interleave_(self)`` (``test_in_place_interleave``): row ``r`` of dim 0 becomes
  row ``r // 4``, the first quarter of the rows each repeated four times.
- ``plain_index(self, indices)`` (``test_plain_index.py``): ``aten::index`` with every index
  given.
- ``exp_fast_math``, ``sqrt_fast_math``, ``rsqrt_fast_math`` (``test_hpu_fast_math.py``):
  hardware's reduced-precision versions, which the test holds to 1% of ``exp``, ``sqrt`` and
  ``rsqrt``; computed exactly here.
"""

from __future__ import annotations

import torch

from hpu_emulator.kernels.checks import expect

BEAMS_PER_BYTE = 4


def _beams(packed: torch.Tensor, count: int) -> list[int]:
    value = int(packed)
    return [(value >> (2 * (BEAMS_PER_BYTE - 1 - k))) & 3 for k in range(count)]


def kv_reorder_(self: torch.Tensor, start: torch.Tensor, end: torch.Tensor,
                beam_idx: torch.Tensor) -> torch.Tensor:
    expect(self.dim() >= 3, "kv_reorder: self must be [batch, beams, ..., seq, dim], got "
           f"{list(self.shape)}")
    beams = self.shape[1]
    expect(1 <= beams <= BEAMS_PER_BYTE,
           f"kv_reorder: {beams} beams; beam_idx packs at most {BEAMS_PER_BYTE} in a byte")
    starts, ends = start.reshape(-1).tolist(), end.reshape(-1).tolist()
    packed = beam_idx.reshape(-1)
    rows = self.shape[0]
    expect(len(starts) >= rows and len(ends) >= rows and packed.numel() >= rows,
           f"kv_reorder: start, end and beam_idx need a value for each of the {rows} rows")
    for i in range(rows):
        length = int(ends[i]) - int(starts[i])
        if length <= 0:
            continue
        window = self[i].narrow(-2, int(starts[i]), length)
        order = torch.tensor(_beams(packed[i], beams), device=self.device)
        window.copy_(window.index_select(0, order))
    return self


def kv_reorder(self: torch.Tensor, start: torch.Tensor, end: torch.Tensor,
               beam_idx: torch.Tensor) -> torch.Tensor:
    return kv_reorder_(self.clone(), start, end, beam_idx)


def in_place_interleave_(self: torch.Tensor) -> torch.Tensor:
    expect(self.dim() >= 1 and self.shape[0] % 4 == 0,
           f"in_place_interleave: dim 0 must be a multiple of 4, got {list(self.shape)}")
    order = torch.arange(self.shape[0], device=self.device) // 4
    self.copy_(self.index_select(0, order))
    return self


def in_place_interleave(self: torch.Tensor) -> torch.Tensor:
    return in_place_interleave_(self.clone())


def plain_index(self: torch.Tensor, indices: list[torch.Tensor]) -> torch.Tensor:
    return torch.ops.aten.index.Tensor(self, list(indices))


def exp_fast_math(self: torch.Tensor) -> torch.Tensor:
    return torch.exp(self)


def sqrt_fast_math(self: torch.Tensor) -> torch.Tensor:
    return torch.sqrt(self)


def rsqrt_fast_math(self: torch.Tensor) -> torch.Tensor:
    return torch.rsqrt(self)
