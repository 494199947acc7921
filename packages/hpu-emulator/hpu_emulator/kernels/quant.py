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
"""

from __future__ import annotations

from typing import Any

import torch

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
