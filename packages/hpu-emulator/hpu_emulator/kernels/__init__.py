"""The Gaudi bridge's custom ops (``torch.ops.hpu.*``) that the ``hpex`` kernels and host
libraries call, as CPU reference implementations for the emulated device.

On Gaudi these are TPC/MME kernels registered by the bridge under the ``hpu`` namespace for
the HPU dispatch key only (a CPU tensor is refused); ``hpex.kernels.FusedSDPA``,
``hpex.normalization.FusedRMSNorm``/``FusedClipNorm``, ``hpex.optimizers.FusedAdamW``/
``FusedSGD``, the rotary helpers, DeepSpeed's HPU FusedAdam and optimum-habana's MoE layers
call them. Here each is the formula of the bridge's documentation or eager reference,
written with ordinary torch ops in float32 (one module per family), registered with the
bridge's schema for the HPU key, with a fake (meta) kernel so that ``torch.compile`` traces
through them. Like the bridge, the ops have no autograd formula of their own: the ``hpex``
autograd functions pair each forward op with its backward op.

Registration happens once, at emulator start, and never when the real bridge defined the ops.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from hpu_emulator import ops
from hpu_emulator.kernels import (
    attention,
    ctc,
    fp8,
    fp8_attention,
    moe,
    normalization,
    optimizers,
    quant,
    rotary,
    softmax,
    tensor_ops,
)

NAMESPACE = ops.NAMESPACE


def _like(t: torch.Tensor, shape: Any = None, dtype: torch.dtype | None = None) -> torch.Tensor:
    return t.new_empty(t.shape if shape is None else shape, dtype=dtype or t.dtype)


def _sdpa_batch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> list[int]:
    return list(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))


def _fake_sdpa_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any, p: float,
                   *rest: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    batch = _sdpa_batch(q, k, v)
    qkt = [*batch, q.shape[-2], k.shape[-2]]
    return (_like(q, [*batch, q.shape[-2], v.shape[-1]]), _like(q, qkt),
            _like(q, qkt if p > 0 else [1], torch.int8))


def _fake_sdpa_recomp_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any,
                          p: float, scale: float, is_causal: bool, requires_backward: bool,
                          softmax_mode: str, *rest: Any) -> tuple[torch.Tensor, ...]:
    batch = _sdpa_batch(q, k, v)
    out = _like(q, [*batch, q.shape[-2], v.shape[-1]])
    seed = _like(q, [1], torch.int32)
    if not requires_backward:
        return out, _like(q, [1]), _like(q, [1], torch.float32), seed
    stats = [*batch, q.shape[-2], 1]
    fast_bf16 = softmax_mode.lower() == "fast" and q.dtype == torch.bfloat16
    return (out, _like(q, stats),
            _like(q, stats, torch.bfloat16 if fast_bf16 else torch.float32), seed)


def _fake_sdpa_bwd(grad: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   *rest: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _like(q), _like(k), _like(v)


def _fake_rms_norm(x: torch.Tensor, gamma: torch.Tensor, eps: float
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    dtype = x.dtype if x.dtype == gamma.dtype else torch.float32
    return _like(x, dtype=dtype), _like(x, [*list(x.shape[:-1]), 1], dtype)


def _fake_rms_norm_backward(grad: torch.Tensor, x: torch.Tensor, gamma: torch.Tensor,
                            *rest: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return _like(x), _like(gamma)


def _fake_first(first: torch.Tensor, *rest: Any) -> torch.Tensor:
    return _like(first)


def _fake_first_arg_of(index: int) -> Callable[..., torch.Tensor]:
    def fake(*args: Any) -> torch.Tensor:
        return _like(args[index])

    return fake


def _fake_none(*args: Any) -> None:
    return None


def _fake_clip_norm(grad: list[torch.Tensor], max_norm: torch.Tensor, norm_type: float
                    ) -> torch.Tensor:
    return _like(grad[-1])


def _fake_cast_to_fp8(input: torch.Tensor, scale: Any = None, stochastic: bool = False,
                      is_amax: bool = False, dtype: torch.dtype | None = None,
                      scale_shape: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    amax = _like(input, [], torch.float32) if is_amax and input.dtype not in fp8.FP8 else (
        _like(input, [0], torch.float32))
    return _like(input, dtype=dtype or torch.float8_e4m3fn), amax


def _fake_cast_from_fp8(input: torch.Tensor, scale: Any, out_dtype: torch.dtype,
                        scale_shape: Any = None) -> torch.Tensor:
    return _like(input, dtype=out_dtype)


def _fake_fp8_gemm(A: torch.Tensor, trans_A: bool, B: torch.Tensor, trans_B: bool, D: Any,
                   out_dtype: torch.dtype, *rest: Any) -> torch.Tensor:
    """``torch.matmul``'s shape of the (transposed) operands: 1-D operands are vectors."""
    a = A.new_empty(A.shape, dtype=torch.float32)
    b = B.new_empty(B.shape, dtype=torch.float32)
    a = a.transpose(-2, -1) if trans_A else a
    b = b.transpose(-2, -1) if trans_B else b
    return torch.matmul(a, b).to(out_dtype)


def _fake_softmax_fp8(input: torch.Tensor, dim: int, input_scale: Any = None,
                      *rest: Any) -> torch.Tensor:
    """The bridge's ``SoftmaxFp8Meta``: fp8 out when an input scale is given, else bf16."""
    return _like(input, dtype=torch.bfloat16 if input_scale is None else torch.float8_e4m3fn)


def _fake_conv2d_fp8(input: torch.Tensor, weight: torch.Tensor, bias: Any = None,
                     stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1,
                     out_dtype: torch.dtype | None = None, *rest: Any) -> torch.Tensor:
    """The output size of ``torch.nn.functional.conv2d``, in ``out_dtype`` (bf16 default)."""
    pair = fp8.spatial_pair
    size = [input.shape[0], weight.shape[0]]
    for i in range(2):
        span = pair(dilation, "dilation")[i] * (weight.shape[2 + i] - 1) + 1
        size.append((input.shape[2 + i] + 2 * pair(padding, "padding")[i] - span)
                    // pair(stride, "stride")[i] + 1)
    return input.new_empty(size, dtype=out_dtype or torch.bfloat16)


def _fake_cast_to_fp8_hybrid(input: torch.Tensor, scale_152: Any = None, scale_143: Any = None,
                             stochastic: bool = False, is_amax: bool = False
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (_like(input, dtype=torch.float8_e5m2), _like(input, dtype=torch.float8_e4m3fn),
            _like(input, [] if is_amax else [0], torch.float32))


def _fake_sum_fp8(self: torch.Tensor, dim: Any = None, keepdim: bool = False,
                  out_dtype: torch.dtype | None = None) -> torch.Tensor:
    dims = [d % max(self.dim(), 1) for d in dim] if dim is not None else list(range(self.dim()))
    shape = [1 if i in dims else n for i, n in enumerate(self.shape)] if keepdim else [
        n for i, n in enumerate(self.shape) if i not in dims]
    return _like(self, shape, out_dtype or self.dtype)


def _fake_masked_triangular(self: torch.Tensor, *rest: Any) -> torch.Tensor:
    out_dtype = rest[5] if len(rest) > 5 else None
    return _like(self, dtype=out_dtype or self.dtype)


def _fake_triangular_retain(self: torch.Tensor, inv_scale_attn: float
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    stats = [*self.shape[:-1], 1]
    return _like(self), _like(self, stats, torch.float32), _like(self, stats)


def _fake_self(self: torch.Tensor, *rest: Any) -> torch.Tensor:
    return self


def _fake_from_int4(input: torch.Tensor, scale: torch.Tensor, zero_point: Any,
                    out_dtype: torch.dtype) -> torch.Tensor:
    return _like(input, [*input.shape[:-1], input.shape[-1] * 8], out_dtype)


def _fake_last(*args: Any) -> torch.Tensor:
    return args[-1]


def _fake_cast_to_fp8_out(input: torch.Tensor, scale: Any, stochastic: bool, out: torch.Tensor,
                          amax: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return out, amax


def _fake_lamb_norm(grad: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    return _like(grad[0], [1])


def _fake_plain_index(self: torch.Tensor, indices: list[torch.Tensor]) -> torch.Tensor:
    return torch.ops.aten.index.Tensor(self, list(indices))


def _fp8_ops() -> list[tuple[str, Callable[..., Any], Callable[..., Any]]]:
    to_fp8 = ("bool stochastic_rounding=False, bool is_amax=False, ScalarType dtype=None, "
              "int[]? scale_shape=None) -> (Tensor, Tensor)")
    gemm = ("(Tensor A, bool trans_A, Tensor B, bool trans_B, Tensor? D, ScalarType out_dtype, "
            "{scales}, Tensor? bias=None, bool accumulate=False, int[]? B_scale_shape=None) "
            "-> Tensor")
    conv = ("(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=1, "
            "SymInt[2] padding=0, SymInt[2] dilation=1, int groups=1, "
            "ScalarType? out_dtype=None, ")
    return [
        (f"cast_to_fp8_v2(Tensor input, Tensor? scale=None, {to_fp8}", fp8.cast_to_fp8_v2,
         _fake_cast_to_fp8),
        (f"cast_to_fp8_v2.scalar(Tensor input, float scale, {to_fp8}",
         fp8.cast_to_fp8_v2_scalar, _fake_cast_to_fp8),
        ("cast_from_fp8(Tensor input, Tensor? scale, ScalarType out_dtype, "
         "int[]? scale_shape=None) -> Tensor", fp8.cast_from_fp8, _fake_cast_from_fp8),
        ("cast_from_fp8.scalar(Tensor input, float scale, ScalarType out_dtype, "
         "int[]? scale_shape=None) -> Tensor", fp8.cast_from_fp8_scalar, _fake_cast_from_fp8),
        ("fp8_gemm_v2" + gemm.format(
            scales="Tensor? A_scale_inv=None, Tensor? B_scale_inv=None"),
         fp8.fp8_gemm_v2, _fake_fp8_gemm),
        ("fp8_gemm_v2.scalar" + gemm.format(scales="float A_scale_inv, float B_scale_inv"),
         fp8.fp8_gemm_v2_scalar, _fake_fp8_gemm),
        ("cast_to_fp8(Tensor input, Tensor? scale, bool stochastic_rounding, Tensor(a!) out, "
         "Tensor(b!) amax) -> (Tensor(a!), Tensor(b!))", fp8.cast_to_fp8, _fake_cast_to_fp8_out),
        ("fp8_gemm(Tensor A, bool trans_A, Tensor B, bool trans_B, Tensor D, "
         "ScalarType out_dtype, Tensor? A_scale_inv, Tensor? B_scale_inv, Tensor? bias, "
         "bool accumulate, Tensor(a!) out) -> Tensor(a!)", fp8.fp8_gemm, _fake_last),
        ("fp8_gemm_v2.scalar_list" + gemm.format(
            scales="float[] A_scale_inv, float[] B_scale_inv"),
         fp8.fp8_gemm_v2_scalar_list, _fake_fp8_gemm),
        (f"cast_to_fp8_v2.scalar_list(Tensor input, float[] scale, {to_fp8}",
         fp8.cast_to_fp8_v2_scalar_list, _fake_cast_to_fp8),
        ("cast_from_fp8.scalar_list(Tensor input, float[] scale, ScalarType out_dtype, "
         "int[]? scale_shape=None) -> Tensor", fp8.cast_from_fp8_scalar_list,
         _fake_cast_from_fp8),
        ("cast_to_fp8_hybrid(Tensor input, Tensor? scale_152=None, Tensor? scale_143=None, "
         "bool stochastic_rounding=False, bool is_amax=False) -> (Tensor, Tensor, Tensor)",
         fp8.cast_to_fp8_hybrid, _fake_cast_to_fp8_hybrid),
        ("sum_fp8(Tensor self, int[1]? dim=None, bool keepdim=False, "
         "ScalarType? out_dtype=None) -> Tensor", fp8.sum_fp8, _fake_sum_fp8),
        ("softmax_fp8(Tensor input, int dim, Tensor? input_scale=None, "
         "Tensor? output_scale=None, Tensor? inv_attn_heads=None, Tensor? fused_add=None) "
         "-> Tensor", fp8.softmax_fp8, _fake_softmax_fp8),
        ("softmax_fp8.Scalar_scales(Tensor input, int dim, float input_scale, "
         "float output_scale, Tensor? inv_attn_heads=None, Tensor? fused_add=None) -> Tensor",
         fp8.softmax_fp8_scalar_scales, _fake_softmax_fp8),
        ("softmax_fp8.Scalar(Tensor input, int dim, float input_scale, float output_scale, "
         "float inv_attn_heads, Tensor? fused_add=None) -> Tensor",
         fp8.softmax_fp8_scalar, _fake_softmax_fp8),
        (f"conv2d_fp8{conv}Tensor? scale_input=None, Tensor? scale_weight=None) -> Tensor",
         fp8.conv2d_fp8, _fake_conv2d_fp8),
        (f"conv2d_fp8.scalar{conv}float scale_input=1.0, float scale_weight=1.0) -> Tensor",
         fp8.conv2d_fp8_scalar, _fake_conv2d_fp8),
    ]


def _given(scale: Any) -> bool:
    """A scale the fp8 attention ops count as given (a tensor with values, or a nonzero
    float of the ``.scalar`` form)."""
    if isinstance(scale, torch.Tensor):
        return scale.numel() > 0
    return scale is not None and float(scale) != 0.0


def _fake_fp8_sdpa_recomp_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any,
                              p: float, scale: float, is_causal: bool,
                              requires_backward: bool, softmax_mode: str, d_scale_q: Any,
                              d_scale_k: Any, d_scale_v: Any, q_scale_s: Any, q_scale_o: Any,
                              d_scale_s: Any, is_amax_s: bool, is_amax_o: bool,
                              *rest: Any) -> tuple[torch.Tensor, ...]:
    batch = _sdpa_batch(q, k, v)
    out_dtype = fp8_attention.recomp_out_dtype(q.dtype, _given(q_scale_o))
    out = _like(q, [*batch, q.shape[-2], v.shape[-1]], out_dtype)
    seed = _like(q, [1], torch.int32)
    amax = (_like(q, [1], torch.float32), _like(q, [1], torch.float32))
    if not (requires_backward or is_amax_s or is_amax_o):
        return (out, _like(q, [1]), _like(q, [1], torch.float32), seed, *amax)
    stats = [*batch, q.shape[-2], 1]
    e4m3 = q.dtype == torch.float8_e4m3fn
    fast_bf16 = softmax_mode.lower() == "fast" and q.dtype == torch.bfloat16
    return (out, _like(q, stats, torch.bfloat16 if e4m3 else q.dtype),
            _like(q, stats, torch.bfloat16 if (e4m3 or fast_bf16) else torch.float32), seed,
            *amax)


def _fake_fp8_sdpa_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any, p: float,
                       scale: float, is_causal: bool, softmax_mode: str, d_scale_q: Any,
                       d_scale_k: Any, d_scale_v: Any, q_scale_s: Any, q_scale_o: Any,
                       *rest: Any) -> tuple[torch.Tensor, ...]:
    batch = _sdpa_batch(q, k, v)
    out_dtype = fp8_attention.plain_out_dtype(q.dtype, _given(q_scale_o))
    return (_like(q, [*batch, q.shape[-2], v.shape[-1]], out_dtype),
            _like(q, [*batch, q.shape[-2], k.shape[-2]]), _like(q, [1], torch.int8),
            _like(q, [1], torch.float32))


def _fp8_attention_ops() -> list[tuple[str, Callable[..., Any], Callable[..., Any]]]:
    """The bridge's fp8 fused attention schemas (``eager_custom_op_register.cpp``)."""
    head = ("(Tensor q, Tensor k, Tensor v, Tensor? attention_mask, float p, float scale, "
            "bool is_causal, ")
    tensors = ("Tensor? d_scale_q, Tensor? d_scale_k, Tensor? d_scale_v, Tensor? q_scale_s, "
               "Tensor? q_scale_o, Tensor? d_scale_s, ")
    floats = ("float d_scale_q, float d_scale_k, float d_scale_v, float q_scale_s, "
              "float q_scale_o, float d_scale_s, ")
    tail = "Tensor? valid_seq_len, str seq_padding_type) -> "
    recomp = ("bool requires_backward, str softmax_mode, {scales}bool is_amax_s, "
              "bool is_amax_0, " + tail + "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")
    return [
        ("fp8_sdpa_recomp_fwd" + head + recomp.format(scales=tensors),
         fp8_attention.fp8_sdpa_recomp_fwd, _fake_fp8_sdpa_recomp_fwd),
        ("fp8_sdpa_recomp_fwd.scalar" + head + recomp.format(scales=floats),
         fp8_attention.fp8_sdpa_recomp_fwd_scalar, _fake_fp8_sdpa_recomp_fwd),
        ("fp8_sdpa_fwd" + head + "str softmax_mode, " + tensors + "bool is_amax_s, " + tail
         + "(Tensor, Tensor, Tensor, Tensor)", fp8_attention.fp8_sdpa_fwd, _fake_fp8_sdpa_fwd),
    ]


def _fake_ctc(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: torch.Tensor,
              target_lengths: torch.Tensor, blank: int, reduction: int, zero_infinity: bool
              ) -> tuple[torch.Tensor, torch.Tensor]:
    batch = log_probs.shape[1] if log_probs.dim() == 3 else 1  # (T, C) is one sample
    steps = log_probs.shape[0]
    loss = _like(log_probs, [batch] if reduction == ctc.NONE else [])
    longest = targets.shape[-1] if targets.dim() == 2 else targets.shape[0]
    return loss, _like(log_probs, [batch, steps, 2 * longest + 1])


def _fake_moe_measurement(hidden_states: torch.Tensor, table: torch.Tensor,
                          weights: torch.Tensor, w1: list[torch.Tensor], *rest: Any
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    # the bridge's eager reference makes the maxima a CPU tensor (torch::zeros without a device)
    return _like(hidden_states), torch.empty(len(w1), dtype=torch.float32, device="cpu")


def _lazy() -> bool:
    """The rule of the bridge's ``utils.internal.is_lazy``, which FusedAdamW and DeepSpeed
    ask: the bridge loads one library per mode, with the ops of that mode."""
    return os.environ.get("PT_HPU_LAZY_MODE", "1") != "0"


def _eager_only_ops() -> list[tuple[str, Callable[..., Any], Callable[..., Any]]]:
    """Ops the bridge v1.19.0 registers in its eager library only (eager_custom_op_register.cpp;
    kernels_register.cpp, the lazy one, has neither)."""
    if _lazy():
        return []
    moe_head = ("(Tensor hidden_states, Tensor expert_routing_table, Tensor router_weights, "
                "{weights}, bool permuted_weights, str activation, int experts_min, "
                "int experts_max, bool measurement_mode) -> (Tensor, Tensor)")
    return [
        ("mixture_of_experts.fp8_measurement" + moe_head.format(
            weights="Tensor[] w1, Tensor[] w2, Tensor[] w3"),
         moe.mixture_of_experts_measured, _fake_moe_measurement),
        ("mixture_of_experts.fp8_measurement_fused_weights" + moe_head.format(
            weights="Tensor[] w12, Tensor[] w3"),
         moe.mixture_of_experts_fused_measured, _fake_moe_measurement),
    ]


def _adamw_pair() -> tuple[str, Callable[..., None]]:
    """The schema of the mode this process runs in (the bridge loads one library per mode)."""
    if _lazy():
        return optimizers.ADAMW_LAZY, optimizers.optimizer_adamw_lazy
    return optimizers.ADAMW_EAGER, optimizers.optimizer_adamw_eager


def _ops() -> list[tuple[str, Callable[..., Any], Callable[..., Any]]]:
    """(schema, kernel, fake kernel) for every op, schemas as the bridge declares them."""
    sdpa_tail = "Tensor? valid_seq_len, str seq_padding_type"
    adamw_schema, adamw = _adamw_pair()
    return [
        ("sdpa_fwd(Tensor q, Tensor k, Tensor v, Tensor? attention_mask, float p, float scale, "
         f"bool is_causal, str softmax_mode, {sdpa_tail}) -> (Tensor, Tensor, Tensor)",
         attention.sdpa_fwd, _fake_sdpa_fwd),
        ("sdpa_bwd(Tensor grad, Tensor q, Tensor k, Tensor v, Tensor P, Tensor? dm, "
         "bool is_causal, float p, float scale, Tensor fwd_out) -> (Tensor, Tensor, Tensor)",
         attention.sdpa_bwd, _fake_sdpa_bwd),
        ("sdpa_recomp_fwd(Tensor q, Tensor k, Tensor v, Tensor? attention_mask, float p, "
         "float scale, bool is_causal, bool requires_backward, str softmax_mode, "
         f"{sdpa_tail}) -> (Tensor, Tensor, Tensor, Tensor)",
         attention.sdpa_recomp_fwd, _fake_sdpa_recomp_fwd),
        ("sdpa_recomp_bwd(Tensor grad, Tensor q, Tensor k, Tensor v, Tensor? attention_mask, "
         "Tensor m, Tensor linv, Tensor? seed, bool is_causal, float p, float scale, "
         "str softmax_mode, Tensor fwd_out) -> (Tensor, Tensor, Tensor)",
         attention.sdpa_recomp_bwd, _fake_sdpa_bwd),
        ("rms_norm(Tensor data_in, Tensor gamma, float epsilon) -> (Tensor, Tensor)",
         normalization.rms_norm, _fake_rms_norm),
        ("rms_norm_fast(Tensor data_in, Tensor gamma, float epsilon) -> (Tensor, Tensor)",
         normalization.rms_norm, _fake_rms_norm),
        ("rms_norm_backward(Tensor grad_in, Tensor data_in, Tensor gamma, Tensor inverse_rms, "
         "bool use_stages, int bwd_mode) -> (Tensor, Tensor)",
         normalization.rms_norm_backward, _fake_rms_norm_backward),
        ("rms_norm_fast_backward(Tensor grad_in, Tensor data_in, Tensor gamma, "
         "Tensor inverse_rms, bool use_stages, int bwd_mode) -> (Tensor, Tensor)",
         normalization.rms_norm_backward, _fake_rms_norm_backward),
        ("fused_clip_norm(Tensor(a!)[] grad, Tensor max_norm, float norm_type) -> Tensor",
         normalization.fused_clip_norm, _fake_clip_norm),
        ("rotary_pos_embedding(Tensor input, Tensor sin, Tensor cos, Tensor? position_ids, "
         "int offset, int mode) -> Tensor", rotary.rotary_pos_embedding, _fake_first),
        ("rotary_pos_embedding_backward(Tensor grad_in, Tensor sin, Tensor cos, "
         "Tensor? position_ids, int offset, int mode) -> Tensor",
         rotary.rotary_pos_embedding_backward, _fake_first),
        ("mixture_of_experts(Tensor hidden_states, Tensor expert_routing_table, "
         "Tensor router_weights, Tensor[] w1, Tensor[] w2, Tensor[] w3, bool permuted_weights, "
         "str activation, int experts_min, int experts_max) -> Tensor",
         moe.mixture_of_experts, _fake_first),
        ("mixture_of_experts.fused_weights(Tensor hidden_states, Tensor expert_routing_table, "
         "Tensor router_weights, Tensor[] w12, Tensor[] w3, bool permuted_weights, "
         "str activation, int experts_min, int experts_max) -> Tensor",
         moe.mixture_of_experts_fused, _fake_first),
        (adamw_schema, adamw, _fake_none),
        (optimizers.SGD, optimizers.optimizer_sgd, _fake_none),
        (optimizers.EMA, optimizers.optimizer_ema, _fake_none),
        (optimizers.LAMB_FUSED_NORM, optimizers.optimizer_lamb_fused_norm, _fake_lamb_norm),
        (optimizers.LAMB_PHASE2, optimizers.optimizer_lamb_phase2, _fake_none),
        (optimizers.SGD_MOMENTUM, optimizers.optimizer_sgd_momentum, _fake_none),
        ("ctc_loss_custom(Tensor log_probs, Tensor targets, Tensor input_lengths, "
         "Tensor target_lengths, int blank, int reduction, bool zero_infinity) "
         "-> (Tensor, Tensor)", ctc.ctc_loss_custom, _fake_ctc),
        ("ctc_loss_custom_backward(Tensor grad, Tensor log_probs, Tensor targets, "
         "Tensor input_lengths, Tensor target_lengths, Tensor neg_log_likelihood, "
         "Tensor log_alpha, int blank, int reduction, bool zero_infinity) -> Tensor",
         ctc.ctc_loss_custom_backward, _fake_first_arg_of(1)),
        *_fp8_ops(),
        *_softmax_ops(),
        *_tensor_ops(),
        *_fp8_attention_ops(),
        *_eager_only_ops(),
    ]


def _softmax_ops() -> list[tuple[str, Callable[..., Any], Callable[..., Any]]]:
    return [
        ("custom_softmax(Tensor input, int flavor) -> Tensor", softmax.custom_softmax,
         _fake_first),
        ("scaled_masked_softmax(Tensor input, Tensor mask, float scale) -> Tensor",
         softmax.scaled_masked_softmax, _fake_first),
        ("scaled_masked_triangular_softmax(Tensor self, Tensor start_end, "
         "float inv_scale_attn, int grouped_batch_size, bool use_max, int mode, "
         "ScalarType? out_dtype=None) -> Tensor",
         softmax.scaled_masked_triangular_softmax, _fake_masked_triangular),
        ("scaled_triangular_softmax(Tensor self, float inv_scale_attn, "
         "Tensor? exp_sum_recpr=None, Tensor? max=None) -> Tensor",
         softmax.scaled_triangular_softmax, _fake_first),
        ("scaled_triangular_softmax_retain(Tensor self, float inv_scale_attn) "
         "-> (Tensor, Tensor, Tensor)",
         softmax.scaled_triangular_softmax_retain, _fake_triangular_retain),
    ]


def _tensor_ops() -> list[tuple[str, Callable[..., Any], Callable[..., Any]]]:
    kv = "Tensor start, Tensor end, Tensor beam_idx"
    return [
        (f"kv_reorder_(Tensor(a!) self, {kv}) -> (Tensor(a!))", tensor_ops.kv_reorder_,
         _fake_self),
        (f"kv_reorder(Tensor self, {kv}) -> Tensor", tensor_ops.kv_reorder, _fake_first),
        ("in_place_interleave_(Tensor(a!) self) -> (Tensor(a!))",
         tensor_ops.in_place_interleave_, _fake_self),
        ("in_place_interleave(Tensor self) -> Tensor", tensor_ops.in_place_interleave,
         _fake_first),
        ("plain_index(Tensor self, Tensor[] indices) -> Tensor", tensor_ops.plain_index,
         _fake_plain_index),
        ("convert_from_int4(Tensor input, Tensor scale, Tensor? zero_point, "
         "ScalarType out_dtype) -> Tensor", quant.convert_from_int4, _fake_from_int4),
        ("convert_from_uint4(Tensor input, Tensor scale, Tensor? zero_point, "
         "ScalarType out_dtype) -> Tensor", quant.convert_from_uint4, _fake_from_int4),
        ("exp_fast_math(Tensor self) -> Tensor", tensor_ops.exp_fast_math, _fake_first),
        ("sqrt_fast_math(Tensor self) -> Tensor", tensor_ops.sqrt_fast_math, _fake_first),
        ("rsqrt_fast_math(Tensor self) -> Tensor", tensor_ops.rsqrt_fast_math, _fake_first),
    ]


def register() -> bool:
    """Define the ops for the HPU key; idempotent. False when the real bridge defined them."""
    with ops.lock:
        if ops.registered(__name__):
            return True
        if ops.defined("sdpa_fwd"):
            return False
        library = ops.library(__name__)
        for schema, kernel, fake in _ops():
            name = schema.split("(", 1)[0]
            library.define(schema)
            library.impl(name, kernel, "HPU")
            torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=library)
        for in_place, functional in FUNCTIONALIZED:
            library.impl(in_place, _functionalized(functional), "Functionalize")
        return True


#: In-place ops whose traced form is their functional twin written back: torch.compile's
#: functionalization takes no custom op returning an alias, and the bridge registers these
#: for its Functionalize key (eager_custom_op_register.cpp, ``*_functionalization_glue``).
FUNCTIONALIZED = (("kv_reorder_", "kv_reorder"), ("in_place_interleave_", "in_place_interleave"))


def _functionalized(functional: str) -> Callable[..., torch.Tensor]:
    def glue(self: torch.Tensor, *args: Any) -> torch.Tensor:
        def unwrap(value: Any) -> Any:
            if isinstance(value, torch.Tensor) and torch._is_functional_tensor(value):
                torch._sync(value)
                return torch._from_functional_tensor(value)
            return value

        inner = [unwrap(value) for value in (self, *args)]
        skip = torch._C._ExcludeDispatchKeyGuard(
            torch._C.DispatchKeySet(torch._C.DispatchKey.Functionalize))
        with skip:
            result = getattr(torch.ops.hpu, functional)(*inner)
        torch._functionalize_replace(self, result)
        torch._functionalize_commit_update(self)
        torch._sync(self)
        return self

    return glue
