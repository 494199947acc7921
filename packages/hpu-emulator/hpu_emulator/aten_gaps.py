"""ATen ops whose CPU kernel refuses inputs the bridge's HPU kernel takes, answered as the
bridge defines the op.

The emulator runs every ATen op's CPU kernel on CPU views of the device's bytes; for these
ops that kernel refuses a dtype or an index type that Gaudi runs. After the refusal (and only
then: the CPU kernel keeps every input it takes, so results stay the CPU's bit for bit) the
C++ fallback calls :func:`handle` with the op's arguments as CPU tensors over the device's
memory; it returns the op's results, or ``NotImplemented`` to let the refusal stand.

- ``lerp`` on integers: the bridge builds ``start + weight * (end - start)`` from its
  ``sub``, ``mult`` and ``add`` nodes in the output dtype (``hpu_ops/backend/lerp_gen.cpp``,
  ``CommonLerp``), a scalar weight cast to that dtype.
- ``trunc``, ``floor``, ``ceil`` of a bool tensor: the bridge runs ``identity`` for every
  integral dtype, bool included (``roundingfunc_gen.cpp``); torch's kernels take integers
  but not bool.
- ``uniform_`` of an integer tensor: the bridge's ``philox_random_uniform`` draws integers
  between the bounds (``random_gen.cpp``, its ``low_i``/``high_i``); drawn here as
  ``random_(from, to)``.
- ``take`` with int32 indices: Gaudi's ``take_fwd`` takes them (the bridge's op test
  ``test_hpu_take.py`` runs int32 indices in eager and lazy mode).
- ``_add_relu`` in bfloat16 or float16: the bridge's ``add_relu_fwd`` gives the test's
  reference ``relu(input + other * alpha)`` with each step rounded to the dtype
  (``test_hpu_add_relu.py``, 1e-5); torch's CPU kernel has no such dtype.
- ``_masked_scale`` and ``_fused_dropout``, which torch has for CUDA only: the bridge's
  ``_masked_scale_gen.cpp`` multiplies ``self * mask`` by ``1 / (1 - 1 / scale)`` in self's
  dtype (the constant cast to it, so truncated for integers); its ``FusedNativeDropout``
  (``fused_dropout_gen.cpp``) takes ``p`` as the dropout ratio, as for ``native_dropout``,
  and returns the scaled result with an int8 mask, drawn from the device's generator.
- ``bernoulli`` with probabilities outside [0, 1]: the bridge checks no range
  (``hpu_ops/backend/bernoulli_gen.cpp``) and its kernel compares a uniform draw with ``p``,
  so a negative ``p`` gives 0 and one above 1 gives 1 (its compiled
  ``test_op_bernoulli_half_static`` draws with ``p`` from ``randn``); drawn here with ``p``
  clamped to [0, 1], the same distribution, from the same generator.
- ``index_copy_`` in lazy mode whose source overlaps its destination (a KV cache updated
  from its own rows): torch's CPU kernel refuses the overlap; the bridge's lazy graph reads
  the source before it writes (``habana_lazy/passes/replace_inplace_ops.cpp``; its lazy
  ``test_kvcache_inplace``), so the source is copied first. The eager kernel states no order
  for an overlap: eager mode keeps torch's refusal.
"""

from __future__ import annotations

from typing import Any

import torch

INTEGRAL = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
LOW_PRECISION = (torch.bfloat16, torch.float16)

_LERP = ("lerp.Scalar", "lerp.Tensor", "lerp_.Scalar", "lerp_.Tensor", "lerp.Scalar_out",
         "lerp.Tensor_out")
_ROUNDING = tuple(f"{name}{suffix}" for name in ("trunc", "floor", "ceil")
                  for suffix in ("", "_", ".out"))
_ADD_RELU = ("_add_relu.Tensor", "_add_relu_.Tensor", "_add_relu.out", "_add_relu.Scalar",
             "_add_relu_.Scalar")
_BERNOULLI = ("bernoulli", "bernoulli.p", "bernoulli_.Tensor", "bernoulli_.float")
OPS = (*_LERP, *_ROUNDING, "uniform_", "take", "take.out", *_ADD_RELU, "_masked_scale",
       "_fused_dropout", *_BERNOULLI, "index_copy_")


def _written(name: str, overload: str, args: tuple[Any, ...]) -> torch.Tensor | None:
    """The tensor an in-place or out= overload writes: self, or the trailing out."""
    if name.endswith("_"):
        return args[0]
    if overload.endswith("out"):
        return args[-1]
    return None


def _deliver(result: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
    if target is None:
        return result
    if target.shape != result.shape:
        target.resize_(result.shape)
    target.copy_(result)
    return target


def _lerp(name: str, overload: str, args: tuple[Any, ...]) -> Any:
    start, end, weight = args[0], args[1], args[2]
    if start.dtype not in INTEGRAL:
        return NotImplemented
    if not isinstance(weight, torch.Tensor):
        weight = int(weight)  # the bridge's constant in the output dtype
    result = start + (end - start) * weight
    return _deliver(result.to(start.dtype), _written(name, overload, args))


def _rounding(name: str, overload: str, args: tuple[Any, ...]) -> Any:
    self = args[0]
    if self.dtype != torch.bool:
        return NotImplemented
    target = _written(name, overload, args)
    if target is self:
        return self
    return _deliver(self.clone(), target)


def _uniform(args: tuple[Any, ...]) -> Any:
    self, low, high, generator = args
    if self.dtype not in INTEGRAL:
        return NotImplemented
    return self.random_(int(low), int(high), generator=generator)


def _take(name: str, overload: str, args: tuple[Any, ...]) -> Any:
    self, index = args[0], args[1]
    if index.dtype != torch.int32:
        return NotImplemented
    return _deliver(torch.take(self, index.long()), _written(name, overload, args))


def _add_relu(name: str, overload: str, args: tuple[Any, ...]) -> Any:
    self, other, alpha = args[0], args[1], args[2]
    if self.dtype not in LOW_PRECISION:
        return NotImplemented
    if isinstance(other, torch.Tensor) and other.dim() == 0 and other.dtype in (
            torch.float64, torch.int64):
        # a Python number the Scalar overload wrapped: the product stays a Python number,
        # as in the reference, and is not rounded to the tensor's dtype before the add
        other = other.item()
    return _deliver(torch.relu(self + other * alpha), _written(name, overload, args))


def _masked_scale(args: tuple[Any, ...]) -> Any:
    self, mask, scale = args
    factor = 1.0 / (1.0 - 1.0 / scale)
    constant = torch.tensor(factor).to(self.dtype)
    return self * mask.to(self.dtype) * constant


def _fused_dropout(args: tuple[Any, ...]) -> Any:
    self, p, generator = args
    keep = torch.empty(self.shape, dtype=torch.float32).bernoulli_(1.0 - p, generator=generator)
    scale = 1.0 / (1.0 - p) if p < 1.0 else 0.0
    return (self * keep.to(self.dtype) * scale).to(self.dtype), keep.to(torch.int8)


def _bernoulli(name: str, overload: str, args: tuple[Any, ...]) -> Any:
    if name == "bernoulli" and overload == "":  # bernoulli(p, generator)
        p, generator = args
        if not p.is_floating_point():
            return NotImplemented
        return torch.bernoulli(p.clamp(0.0, 1.0), generator=generator)
    self, p, generator = args
    if isinstance(p, torch.Tensor):
        p = p.clamp(0.0, 1.0)
    else:
        p = min(max(float(p), 0.0), 1.0)
    if name == "bernoulli_":
        return self.bernoulli_(p, generator=generator)
    return torch.bernoulli(self, p, generator=generator)


def _index_copy_overlapping(args: tuple[Any, ...]) -> Any:
    from hpu_emulator import lazy

    self, dim, index, source = args[:4]
    if not lazy.is_lazy() or (self.untyped_storage().data_ptr()
                              != source.untyped_storage().data_ptr()):
        return NotImplemented
    return self.index_copy_(dim, index, source.clone())


def handle(name: str, overload: str, args: tuple[Any, ...]) -> Any:
    """The results of ``name.overload`` on ``args`` (CPU tensors over device memory), or
    ``NotImplemented`` when the CPU kernel's refusal should stand."""
    base = name.split("::", 1)[-1]
    if base in ("lerp", "lerp_"):
        return _lerp(base, overload, args)
    if base.rstrip("_") in ("trunc", "floor", "ceil"):
        return _rounding(base, overload, args)
    if base == "uniform_":
        return _uniform(args)
    if base == "take":
        return _take(base, overload, args)
    if base in ("_add_relu", "_add_relu_"):
        return _add_relu(base, overload, args)
    if base == "_masked_scale":
        return _masked_scale(args)
    if base == "_fused_dropout":
        return _fused_dropout(args)
    if base in ("bernoulli", "bernoulli_"):
        return _bernoulli(base, overload, args)
    if base == "index_copy_":
        return _index_copy_overlapping(args)
    return NotImplemented


def register() -> None:
    """Hand :func:`handle` to the C++ fallback for :data:`OPS` (those this torch has)."""
    from hpu_emulator import runtime

    names = []
    for op in OPS:
        base, _, overload = op.partition(".")
        try:
            torch._C._get_schema(f"aten::{base}", overload)
        except RuntimeError:
            continue
        names.append(f"aten::{op}")
    runtime.extension().set_gap_handler(handle, names)
