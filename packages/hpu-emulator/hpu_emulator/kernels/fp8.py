"""The bridge's float8 ops: ``hpu::cast_to_fp8_v2``, ``cast_from_fp8`` and ``fp8_gemm_v2``
(tensor and ``.scalar`` scale forms), which DeepSpeed's HPU fp quantizer, optimum-habana,
Intel Neural Compressor's fp8 modules and the Transformer Engine stand-in call, and
``softmax_fp8`` and ``conv2d_fp8`` (Neural Compressor's patched ``Softmax`` and ``Conv2d``).

Semantics, from the bridge's schemas and its own op tests (``test_hpu_fp8_ops_any_mode.py``):
``cast_to_fp8_v2`` multiplies by ``scale``, saturates to the format's range and rounds to
nearest into ``dtype`` (``float8_e4m3fn`` or ``float8_e5m2``; E4M3 saturates at 240 on
Gaudi2, at 448 on Gaudi3: ``Generation.e4m3_max``); with ``is_amax`` it also returns the
largest magnitude of the input as a 0-dim float32, else an empty tensor. A float8 input is
passed through when the dtypes agree and refused otherwise, with the bridge's messages.
``cast_from_fp8`` multiplies by the (inverse) scale into ``out_dtype``. ``fp8_gemm_v2``
computes ``op(A) * a_scale_inv @ op(B) * b_scale_inv (+ bias) (+ D when accumulate)`` in
float32 and rounds once to ``out_dtype``. fp8 needs Gaudi2 or later: on first-generation
Gaudi every one of these ops refuses.

``softmax_fp8`` (schemas and checks of the bridge's ``SoftmaxFp8`` backend, values of its op
test ``test_softmax_fp8``): ``softmax(x * inv_attn_heads * input_scale + fused_add, dim)``, each
factor only when given; with scales the result is multiplied by ``output_scale`` and saturated
into ``float8_e4m3fn``, without them it is bfloat16. The input is bfloat16, or
``float8_e4m3fn`` with an input scale; the two scales come together or not at all, and
``fused_add`` (bfloat16) needs them. Computed in float32, rounded once.

``conv2d_fp8`` (the bridge's ``Conv2dFp8`` backend and its op test ``test_conv2d_fp8``):
``conv2d(input, weight) * scale_input * scale_weight + bias`` in float32, rounded once to
``out_dtype`` (bfloat16 when not given); 4-D input and weight, a 1-D bias of one value per
output channel, and single-element scales only (the bridge's "Multi-element scale tensors are
not supported yet.").

Scaling happens in the input's precision (``cast_to_fp8_v2``: the input's dtype, the scale
cast to it; ``cast_from_fp8``: ``out_dtype``), as the bridge's op test computes its reference
(``input * scale.to(dtype)`` in bfloat16 for a bfloat16 input), so a bfloat16 value is
rounded to bfloat16 before float8. ``fp8_gemm_v2`` applies its scales to the product, so a
``B_scale_shape`` of one value per output row or column broadcasts over it (the test's
reference: ``matmul(A, B) * (scale_a * scale_b)``). ``cast_to_fp8_hybrid`` casts one input
to both formats at once (E5M2 with stochastic rounding when asked, E4M3 to nearest), each
with its own optional scale. ``sum_fp8`` sums a float8 tensor in float32 into ``out_dtype``
(the input's when not given). The ``.scalar_list`` forms take per-channel scales as a list of
floats, shaped by ``scale_shape``.

``stochastic_rounding=True`` rounds each value to one of its two float8 neighbours with the
probabilities that make the rounding unbiased, drawn from the HPU generator (the bridge's
test allows a relative 0.26 and requires a difference from nearest rounding).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from hpu_emulator.kernels.checks import expect
from hpu_plugin.gaudi.generations import generation_from_name

FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _generation_checked(op: str) -> float:
    """E4M3 limit of the emulated generation; refuses on first-generation Gaudi."""
    from hpu_emulator import runtime

    generation = generation_from_name(runtime.current_config().device_name)
    assert generation is not None  # the emulator runs a known generation
    expect(generation.fp8, f"{op}: fp8 is not supported on {generation.name}; fp8 needs "
           "Gaudi2 or later (run in bf16, or emulate gaudi2/gaudi3)")
    return generation.e4m3_max


def limit(dtype: torch.dtype) -> float:
    """Largest finite value of ``dtype`` on the emulated generation."""
    if dtype == torch.float8_e4m3fn:
        return _generation_checked("fp8")
    return float(torch.finfo(dtype).max)


def _flo8_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.f", "F")


def _scale_tensor(scale: torch.Tensor | float | Sequence[float] | None, like: torch.Tensor,
                  scale_shape: Sequence[int] | None,
                  dtype: torch.dtype = torch.float32) -> torch.Tensor | None:
    """The scale as a tensor of ``dtype`` on ``like``'s device, in ``scale_shape`` if given.
    A list of floats is a ``.scalar_list`` form's per-channel scale."""
    if scale is None:
        return None
    if isinstance(scale, (int, float)):  # one value: no shape to check (the bridge's rule)
        return torch.tensor(float(scale), device=like.device, dtype=dtype)
    value = scale if isinstance(scale, torch.Tensor) else torch.tensor([float(v) for v in scale])
    if scale_shape is not None:
        expect(value.numel() == _numel(scale_shape),
               f"Number of scale elements ({value.numel()}) is not equal to number of "
               f"scale_shape elements ({_numel(scale_shape)}).")
    value = value.to(device=like.device, dtype=dtype)
    if scale_shape is not None and value.numel() > 1:
        value = value.reshape(tuple(scale_shape))
    return value


def _numel(shape: Sequence[int]) -> int:
    count = 1
    for size in shape:
        count *= int(size)
    return count


def _stochastic(value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round each magnitude up to the next float8 value with probability equal to its distance
    from the one below over the gap, else down: unbiased in expectation. Works on the bit
    patterns of the magnitudes, which increase with the value for finite float8 numbers."""
    magnitude = value.abs()
    nearest = magnitude.to(dtype)
    bits = nearest.view(torch.uint8).to(torch.int16)
    above = nearest.float() > magnitude
    low_bits = torch.where(above, bits - 1, bits)
    exact = nearest.float() == magnitude
    high_bits = torch.where(above | exact, bits, bits + 1)
    low = low_bits.to(torch.uint8).view(dtype).float()
    high = high_bits.to(torch.uint8).view(dtype).float()
    gap = (high - low).clamp_min(torch.finfo(torch.float32).tiny)
    up = torch.rand(magnitude.shape, device=value.device) < (magnitude - low) / gap
    rounded = torch.where(up, high, low)
    return torch.where(value < 0, -rounded, rounded).to(dtype)


def cast_to_fp8_v2(input: torch.Tensor, scale: torch.Tensor | float | None = None,
                   stochastic_rounding: bool = False, is_amax: bool = False,
                   dtype: torch.dtype | None = None, scale_shape: Sequence[int] | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    e4m3_max = _generation_checked("cast_to_fp8_v2")
    dtype = dtype or torch.float8_e4m3fn
    expect(dtype in FP8, f"cast_to_fp8_v2: dtype must be torch.float8_e4m3fn or "
           f"torch.float8_e5m2, got {dtype}")
    if input.dtype in FP8:
        expect(not is_amax, "CastToFp8V2 must have no amax for float8.")
        expect(input.dtype == dtype, "CastToFp8V2 input and output must have the same dtype "
               f"for float8, but are {_flo8_name(input.dtype)} and {_flo8_name(dtype)}")
        return input.clone(), input.new_empty(0, dtype=torch.float32)
    expect(input.dtype in (torch.float32, torch.bfloat16), "CastToFp8V2 input dtype must be "
           "one of [float, bfloat16, float8_e5m2, float8_e4m3fn].")
    casted = _to_fp8(input, scale, scale_shape, stochastic_rounding, dtype, e4m3_max)
    amax = (input.float().abs().amax() if is_amax
            else input.new_empty(0, dtype=torch.float32))
    return casted, amax


def _to_fp8(input: torch.Tensor, scale: torch.Tensor | float | Sequence[float] | None,
            scale_shape: Sequence[int] | None, stochastic: bool, dtype: torch.dtype,
            e4m3_max: float) -> torch.Tensor:
    """Scale in the input's dtype, saturate to the format's range, round into ``dtype``."""
    bound = e4m3_max if dtype == torch.float8_e4m3fn else float(torch.finfo(dtype).max)
    scaled = input
    factor = _scale_tensor(scale, input, scale_shape, input.dtype)
    if factor is not None:
        scaled = scaled * factor
    clamped = scaled.float().clamp(-bound, bound)
    return _stochastic(clamped, dtype) if stochastic else clamped.to(dtype)


def cast_to_fp8_hybrid(input: torch.Tensor, scale_152: torch.Tensor | None = None,
                       scale_143: torch.Tensor | None = None, stochastic_rounding: bool = False,
                       is_amax: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    e4m3_max = _generation_checked("cast_to_fp8_hybrid")
    expect(input.dtype in (torch.float32, torch.bfloat16),
           "CastToFp8Hybrid input must be of float or bfloat16 dtype.")
    out_152 = _to_fp8(input, scale_152, None, stochastic_rounding, torch.float8_e5m2, e4m3_max)
    out_143 = _to_fp8(input, scale_143, None, False, torch.float8_e4m3fn, e4m3_max)
    amax = (input.float().abs().amax() if is_amax
            else input.new_empty(0, dtype=torch.float32))
    return out_152, out_143, amax


def sum_fp8(self: torch.Tensor, dim: Sequence[int] | None = None, keepdim: bool = False,
            out_dtype: torch.dtype | None = None) -> torch.Tensor:
    _generation_checked("sum_fp8")
    dims = list(dim) if dim is not None else list(range(self.dim()))
    total = torch.sum(self.to(torch.float32), dims, keepdim) if dims else self.float().clone()
    return total.to(out_dtype or self.dtype)


def cast_from_fp8(input: torch.Tensor, scale: torch.Tensor | float | None,
                  out_dtype: torch.dtype, scale_shape: Sequence[int] | None = None
                  ) -> torch.Tensor:
    _generation_checked("cast_from_fp8")
    expect(out_dtype in (torch.float32, torch.bfloat16),
           "CastFromFp8 output dtype must be equal to float or bfloat16.")
    value = input.to(out_dtype)
    factor = _scale_tensor(scale, input, scale_shape, out_dtype)
    if factor is not None:
        value = value * factor
    return value


def fp8_gemm_v2(A: torch.Tensor, trans_A: bool, B: torch.Tensor, trans_B: bool,
                D: torch.Tensor | None, out_dtype: torch.dtype,
                A_scale_inv: torch.Tensor | float | None = None,
                B_scale_inv: torch.Tensor | float | None = None,
                bias: torch.Tensor | None = None, accumulate: bool = False,
                B_scale_shape: Sequence[int] | None = None) -> torch.Tensor:
    _generation_checked("fp8_gemm_v2")
    a = A.float().transpose(-2, -1) if trans_A else A.float()
    b = B.float().transpose(-2, -1) if trans_B else B.float()
    out = torch.matmul(a, b)
    scales = (_scale_tensor(A_scale_inv, A, None), _scale_tensor(B_scale_inv, B, B_scale_shape))
    for factor in scales:
        if factor is not None:
            out = out * factor
    if bias is not None:
        out = out + bias.float()
    if accumulate:
        expect(D is not None, "fp8_gemm_v2: accumulate=True needs D")
        out = out + D.float()
    return out.to(out_dtype)


def cast_to_fp8_v2_scalar(input: torch.Tensor, scale: float, stochastic_rounding: bool = False,
                          is_amax: bool = False, dtype: torch.dtype | None = None,
                          scale_shape: Sequence[int] | None = None
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    return cast_to_fp8_v2(input, scale, stochastic_rounding, is_amax, dtype, scale_shape)


def cast_from_fp8_scalar(input: torch.Tensor, scale: float, out_dtype: torch.dtype,
                         scale_shape: Sequence[int] | None = None) -> torch.Tensor:
    return cast_from_fp8(input, scale, out_dtype, scale_shape)


def cast_to_fp8(input: torch.Tensor, scale: torch.Tensor | None, stochastic_rounding: bool,
                out: torch.Tensor, amax: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The first cast op, writing into ``out`` (its dtype the format) and, when ``amax`` has an
    element, the input's largest magnitude into it (the bridge's ``CastToFp8``)."""
    e4m3_max = _generation_checked("cast_to_fp8")
    expect(input.dtype in (torch.float32, torch.bfloat16),
           "CastToFp8 input must be of float or bfloat16 dtype.")
    expect(input.shape == out.shape, "Input and output must have the same shape")
    expect(out.dtype in FP8, f"cast_to_fp8: out must be float8, got {out.dtype}")
    out.copy_(_to_fp8(input, scale, None, stochastic_rounding, out.dtype, e4m3_max))
    if amax.numel() != 0:
        amax.copy_(input.float().abs().amax().reshape(amax.shape))
    return out, amax


def fp8_gemm(A: torch.Tensor, trans_A: bool, B: torch.Tensor, trans_B: bool, D: torch.Tensor,
             out_dtype: torch.dtype, A_scale_inv: torch.Tensor | None,
             B_scale_inv: torch.Tensor | None, bias: torch.Tensor | None, accumulate: bool,
             out: torch.Tensor) -> torch.Tensor:
    """The first gemm op: ``fp8_gemm_v2``'s product written into ``out``."""
    result = fp8_gemm_v2(A, trans_A, B, trans_B, D, out_dtype, A_scale_inv, B_scale_inv, bias,
                         accumulate)
    if out.shape != result.shape:
        out.resize_(result.shape)
    return out.copy_(result)


def cast_to_fp8_v2_scalar_list(input: torch.Tensor, scale: Sequence[float],
                               stochastic_rounding: bool = False, is_amax: bool = False,
                               dtype: torch.dtype | None = None,
                               scale_shape: Sequence[int] | None = None
                               ) -> tuple[torch.Tensor, torch.Tensor]:
    return cast_to_fp8_v2(input, list(scale), stochastic_rounding, is_amax, dtype,  # type: ignore[arg-type]
                          scale_shape)


def cast_from_fp8_scalar_list(input: torch.Tensor, scale: Sequence[float], out_dtype: torch.dtype,
                              scale_shape: Sequence[int] | None = None) -> torch.Tensor:
    return cast_from_fp8(input, list(scale), out_dtype, scale_shape)  # type: ignore[arg-type]


def fp8_gemm_v2_scalar_list(A: torch.Tensor, trans_A: bool, B: torch.Tensor, trans_B: bool,
                            D: torch.Tensor | None, out_dtype: torch.dtype,
                            A_scale_inv: Sequence[float], B_scale_inv: Sequence[float],
                            bias: torch.Tensor | None = None, accumulate: bool = False,
                            B_scale_shape: Sequence[int] | None = None) -> torch.Tensor:
    return fp8_gemm_v2(A, trans_A, B, trans_B, D, out_dtype, list(A_scale_inv),  # type: ignore[arg-type]
                       list(B_scale_inv), bias, accumulate, B_scale_shape)  # type: ignore[arg-type]


def fp8_gemm_v2_scalar(A: torch.Tensor, trans_A: bool, B: torch.Tensor, trans_B: bool,
                       D: torch.Tensor | None, out_dtype: torch.dtype, A_scale_inv: float,
                       B_scale_inv: float, bias: torch.Tensor | None = None,
                       accumulate: bool = False, B_scale_shape: Sequence[int] | None = None
                       ) -> torch.Tensor:
    return fp8_gemm_v2(A, trans_A, B, trans_B, D, out_dtype, A_scale_inv, B_scale_inv, bias,
                       accumulate, B_scale_shape)


def scaled_mm(self: torch.Tensor, mat2: torch.Tensor, scale_a: torch.Tensor,
              scale_b: torch.Tensor, bias: torch.Tensor | None = None,
              scale_result: torch.Tensor | None = None, out_dtype: torch.dtype | None = None,
              use_fast_accum: bool = False) -> torch.Tensor:
    """``torch._scaled_mm`` as the bridge computes it (its op test, ``test_hpu_scaled_mm_25``:
    ``mm(a, b) * scale_a * scale_b * scale_result + bias``), where torch's CPU kernel divides
    by ``scale_result``. The product accumulates in float32; an fp8 result saturates at the
    emulated generation's limit (E4M3: 240 on Gaudi2) instead of becoming NaN. Mixed fp8
    inputs need Gaudi3, as the bridge's test says."""
    from hpu_emulator import runtime

    _generation_checked("_scaled_mm")
    expect(self.dtype in FP8 and mat2.dtype in FP8,
           f"_scaled_mm: both inputs must be float8, got {self.dtype} and {mat2.dtype}")
    if self.dtype != mat2.dtype:
        expect(runtime.current_config().generation == "gaudi3",
               f"_scaled_mm: mixed fp8 inputs ({_flo8_name(self.dtype)} and "
               f"{_flo8_name(mat2.dtype)}) are supported only on Gaudi3")
    out = torch.matmul(self.float(), mat2.float()) * scale_a.float() * scale_b.float()
    if scale_result is not None:
        out = out * scale_result.float()
    if bias is not None:
        out = out + bias.float()
    dtype = out_dtype or self.dtype
    if dtype in FP8:
        bound = limit(dtype)
        out = out.clamp(-bound, bound)
    return out.to(dtype)


def _scale_factor(op: str, name: str, value: torch.Tensor | float | None
                  ) -> torch.Tensor | float | None:
    if isinstance(value, torch.Tensor):
        expect(value.dtype == torch.float32, f"Input {name} must be of dtype: Float "
               f"({op}: got {value.dtype})")
        return value.float()
    return value


def softmax_fp8(input: torch.Tensor, dim: int, input_scale: torch.Tensor | float | None = None,
                output_scale: torch.Tensor | float | None = None,
                inv_attn_heads: torch.Tensor | float | None = None,
                fused_add: torch.Tensor | None = None) -> torch.Tensor:
    e4m3_max = _generation_checked("softmax_fp8")
    expect(input.dtype in (torch.bfloat16, torch.float8_e4m3fn),
           "Input tensor must be of torch.bfloat16 or torch.float8_e4m3fn dtype.")
    scaled = input_scale is not None
    expect(scaled == (output_scale is not None),
           "Output and input scales must be both given or None")
    expect(input.dtype != torch.float8_e4m3fn or scaled,
           "If Input is of torch.float8_e4m3fn dtype then input scale must be given.")
    rank = input.dim()
    if fused_add is not None:
        expect(scaled, "FusedAdd available only for Float8 output, but input scale is not "
               "given.")
        expect(fused_add.dim() == rank,
               "FusedAdd tensor must have the same rank as the input tensor")
        expect(fused_add.shape[0] == input.shape[0] and fused_add.shape[-1] == input.shape[-1],
               "FusedAdd tensor must have the same first and last dim as the input tensor")
        expect(all(fused_add.shape[i] in (1, input.shape[i]) for i in range(1, rank - 1)),
               "FusedAdd tensor's dim other than first and last should be equal to 1 or the "
               "same as the input tensor")
        expect(fused_add.dtype == torch.bfloat16,
               "Input fused_add must be of dtype: BFloat16")
    value = input.float()
    for factor in (inv_attn_heads, input_scale):
        factor = _scale_factor("softmax_fp8", "scale", factor)
        if factor is not None:
            value = value * factor
    if fused_add is not None:
        value = value + fused_add.float()
    probs = torch.softmax(value, dim)
    if not scaled:
        return probs.to(torch.bfloat16)
    out_factor = _scale_factor("softmax_fp8", "scale", output_scale)
    return (probs * out_factor).clamp(-e4m3_max, e4m3_max).to(torch.float8_e4m3fn)


def softmax_fp8_scalar_scales(input: torch.Tensor, dim: int, input_scale: float,
                              output_scale: float, inv_attn_heads: torch.Tensor | None = None,
                              fused_add: torch.Tensor | None = None) -> torch.Tensor:
    return softmax_fp8(input, dim, input_scale, output_scale, inv_attn_heads, fused_add)


def softmax_fp8_scalar(input: torch.Tensor, dim: int, input_scale: float, output_scale: float,
                       inv_attn_heads: float, fused_add: torch.Tensor | None = None
                       ) -> torch.Tensor:
    return softmax_fp8(input, dim, input_scale, output_scale, inv_attn_heads, fused_add)


def spatial_pair(value: Sequence[int] | int, name: str) -> list[int]:
    """The bridge's ``expand_param_if_needed``: one value stands for both spatial dims."""
    values = [value] if isinstance(value, int) else list(value)
    expect(len(values) in (1, 2), f"conv2d_fp8: {name} must have 1 or 2 values, got {values}")
    return values * 2 if len(values) == 1 else values


def conv2d_fp8(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
               stride: Sequence[int] | int = 1, padding: Sequence[int] | int = 0,
               dilation: Sequence[int] | int = 1, groups: int = 1,
               out_dtype: torch.dtype | None = None,
               scale_input: torch.Tensor | float | None = None,
               scale_weight: torch.Tensor | float | None = None) -> torch.Tensor:
    _generation_checked("conv2d_fp8")
    expect(input.dim() == 4 and weight.dim() == 4, "Input and weight must be 4D tensors")
    if bias is not None:
        expect(bias.dim() == 1 and bias.shape[0] == weight.shape[0],
               "Bias must be 1D tensor with size equal to weight dim0")
    out = torch.nn.functional.conv2d(
        input.float(), weight.float(), None, spatial_pair(stride, "stride"),
        spatial_pair(padding, "padding"), spatial_pair(dilation, "dilation"), groups)
    for scale in (scale_input, scale_weight):
        if isinstance(scale, torch.Tensor):
            expect(scale.numel() == 1, "Multi-element scale tensors are not supported yet.")
            out = out * scale.float().reshape(())
        elif scale is not None:
            out = out * scale
    if bias is not None:
        out = out + bias.float().view(1, -1, 1, 1)
    return out.to(out_dtype or torch.bfloat16)


def conv2d_fp8_scalar(input: torch.Tensor, weight: torch.Tensor,
                      bias: torch.Tensor | None = None, stride: Sequence[int] | int = 1,
                      padding: Sequence[int] | int = 0, dilation: Sequence[int] | int = 1,
                      groups: int = 1, out_dtype: torch.dtype | None = None,
                      scale_input: float = 1.0, scale_weight: float = 1.0) -> torch.Tensor:
    return conv2d_fp8(input, weight, bias, stride, padding, dilation, groups, out_dtype,
                      scale_input, scale_weight)
