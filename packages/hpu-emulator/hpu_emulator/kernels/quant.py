"""HPU kernels for torch's ``quantized_decomposed`` quantize ops, as the bridge runs them.

The bridge registers its own HPU kernels for these ops (``scripts/hpu_op.yaml``:
``quantize_per_tensor`` and its ``.tensor``/``.tensor2`` forms, ``quantize_per_channel``,
``dequantize_per_channel``; ``hpu_ops/backend/quant_dequant_gen.cpp``), which differ from
torch's own decompositions that the emulator would otherwise run:

- quantizing divides by the scale in the input's dtype (torch multiplies by its reciprocal)
  and rounds to an integer only for integer outputs: a float8 output takes the value to
  nearest float8 (torch rounds it to an integer first). Per channel, the scales and zero
  points are taken in the input's dtype and the input multiplied by ``1 / scale``, the
  result held in the input's dtype before the cast (the bridge's test reference,
  ``test_hpu_quant_dequant.py``, compared exactly).
- dequantizing per channel casts the input to the output dtype before subtracting the zero
  points, so float8 inputs work (torch's decomposition promotes float8 with int64, which
  torch refuses).

Registered when ``torch.ao.quantization.fx._decomposed`` (which defines the ops) is imported.

Also the bridge's 4-bit dequantization, ``hpu::convert_from_int4`` and ``convert_from_uint4``
(``input, scale, zero_point?, out_dtype``; ``hpu_ops/backend/int4_ops.cpp``, its op test
``test_hpu_convert_from_int4.py``): each int32 of ``input`` holds eight 4-bit values, the
first in the lowest bits, so the output's last dim is eight times the input's; the values
are signed for ``int4``, unsigned for ``uint4``. The result is ``(w - zero_point) * scale``
in ``out_dtype``. A zero point in int32 is packed the same way and subtracted as an integer;
any other is subtracted in ``out_dtype``. Scale and zero point cover the output, or one row
of it for each group of rows (GPTQ's per-group scales: ``[rows / group, cols]``).
"""

from __future__ import annotations

from typing import Any

import torch

from hpu_emulator.kernels.checks import expect

MODULE = "torch.ao.quantization.fx._decomposed"
INTEGER_OUTPUTS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _per_tensor(input: torch.Tensor, scale: Any, zero_point: Any, quant_min: Any,
                quant_max: Any, dtype: torch.dtype) -> torch.Tensor:
    value = input / scale
    if dtype in INTEGER_OUTPUTS:
        value = torch.round(value)
    return torch.clamp(value + zero_point, quant_min, quant_max).to(dtype)


def _along(values: torch.Tensor, input: torch.Tensor, axis: int) -> torch.Tensor:
    shape = [1] * input.dim()
    shape[axis] = -1
    return values.reshape(shape)


def quantize_per_channel(input: torch.Tensor, scales: torch.Tensor, zero_points: torch.Tensor,
                         axis: int, quant_min: int, quant_max: int, dtype: torch.dtype
                         ) -> torch.Tensor:
    inverse = _along(1.0 / scales.to(input.dtype), input, axis)
    value = input * inverse
    if dtype in INTEGER_OUTPUTS:
        value = torch.round(value)
    value = value + _along(zero_points.to(input.dtype), input, axis)
    return torch.clamp(value, quant_min, quant_max).to(input.dtype).to(dtype)


def dequantize_per_channel(input: torch.Tensor, scales: torch.Tensor,
                           zero_points: torch.Tensor | None, axis: int, quant_min: int,
                           quant_max: int, dtype: torch.dtype,
                           out_dtype: torch.dtype | None = None) -> torch.Tensor:
    out_dtype = out_dtype or torch.float32
    value = input.to(out_dtype)
    if zero_points is not None:
        value = value - _along(zero_points, input, axis)
    return (value * _along(scales, input, axis)).to(out_dtype)


def _unpack(packed: torch.Tensor, signed: bool) -> torch.Tensor:
    """Eight 4-bit values from each int32, the first in the lowest bits."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=packed.device)
    nibbles = (packed.to(torch.int32).unsqueeze(-1) >> shifts) & 0xF
    if signed:
        nibbles = torch.where(nibbles > 7, nibbles - 16, nibbles)
    return nibbles.reshape(*packed.shape[:-1], packed.shape[-1] * 8)


def _cover(value: torch.Tensor, shape: torch.Size, name: str) -> torch.Tensor:
    """``value`` repeated along each dim it divides, to ``shape`` (per-group rows)."""
    expect(value.dim() == len(shape), f"convert_from_int4: {name} must have the output's rank "
           f"{len(shape)}, got {list(value.shape)}")
    for dim, (have, want) in enumerate(zip(value.shape, shape, strict=True)):
        expect(want % have == 0, f"convert_from_int4: {name} dim {dim} ({have}) does not "
               f"divide the output's ({want})")
        if have != want:
            value = value.repeat_interleave(want // have, dim)
    return value


def _convert_from_4bit(input: torch.Tensor, scale: torch.Tensor,
                       zero_point: torch.Tensor | None, out_dtype: torch.dtype,
                       signed: bool) -> torch.Tensor:
    expect(input.dtype == torch.int32, f"convert_from_int4: input must be int32 (eight 4-bit "
           f"values each), got {input.dtype}")
    values = _unpack(input, signed)
    shape = values.shape
    if zero_point is None:
        shifted = values.to(out_dtype)
    elif zero_point.dtype == torch.int32:
        shifted = (values - _cover(_unpack(zero_point, signed), shape, "zero_point")).to(out_dtype)
    else:
        shifted = values.to(out_dtype) - _cover(zero_point.to(out_dtype), shape, "zero_point")
    return shifted * _cover(scale.to(out_dtype), shape, "scale")


def convert_from_int4(input: torch.Tensor, scale: torch.Tensor,
                      zero_point: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    return _convert_from_4bit(input, scale, zero_point, out_dtype, signed=True)


def convert_from_uint4(input: torch.Tensor, scale: torch.Tensor,
                       zero_point: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    return _convert_from_4bit(input, scale, zero_point, out_dtype, signed=False)


def register(_module: Any = None) -> None:
    """HPU kernels for the ops, once they are defined; idempotent."""
    from hpu_emulator import ops

    with ops.lock:
        if ops.registered(__name__):
            return
        library = ops.library(__name__, "quantized_decomposed", "IMPL")
        for overload in ("quantize_per_tensor", "quantize_per_tensor.tensor",
                         "quantize_per_tensor.tensor2"):
            library.impl(overload, _per_tensor, "HPU")
        library.impl("quantize_per_channel", quantize_per_channel, "HPU")
        library.impl("dequantize_per_channel", dequantize_per_channel, "HPU")


def register_when_imported() -> None:
    from hpu_plugin import importhook

    importhook.when_imported(MODULE, register, owner="emulator")
