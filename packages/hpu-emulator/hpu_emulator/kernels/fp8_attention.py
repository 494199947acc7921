"""The bridge's fp8 fused attention ops, ``hpu::fp8_sdpa_recomp_fwd`` (tensor and ``.scalar``
scales) and ``hpu::fp8_sdpa_fwd``, which ``hpex.kernels.fp8_fused_sdpa`` calls and through it
Intel Neural Compressor's ``PatchedModuleFusedSDPA`` (optimum-habana's ``ModuleFusedSDPA``
measured in bf16, then run in fp8).

Schemas, output shapes and dtypes are the bridge's (``eager_custom_op_register.cpp``,
``hpu_ops/backend/sdpa_gen.cpp``); values follow its op test ``test_hpu_sdpa_fp8.py``, whose
reference is ``softmax(q k^T * scale + mask) v`` computed in bf16 and whose scales are
multipliers into fp8 (``cast_to_fp8_v2(q, scale_q)``, ``d_scale_q = 1 / scale_q``):

- ``q``, ``k``, ``v`` are each multiplied by their ``d_scale_*`` when given (fp8 inputs
  carry values times their scale); the scores, the softmax and the products are float32.
- fp8 inputs: the probabilities are multiplied by ``q_scale_s``, rounded to the inputs'
  float8 dtype (E4M3 saturates at the generation's limit: 240 on Gaudi2, 448 on Gaudi3) and
  multiplied by ``d_scale_s`` before the product with ``v``, as the kernel's second GEMM
  takes fp8 operands. bf16 inputs (a measure run) keep them in float32.
- ``out``: with E4M3 inputs and ``q_scale_o``, ``out * q_scale_o`` rounded to E4M3, else
  bf16 (the recompute op); the plain op returns the inputs' float8 dtype with ``q_scale_o``
  and bf16 without. bf16 inputs give bf16.
- ``amax_s`` (``is_amax_s``) is the largest probability, ``amax_o`` (``is_amax_o``) the
  largest output magnitude before ``q_scale_o``, each a float32 ``[1]``; an amax not asked
  for is a zero ``[1]``, as the outputs the kernel leaves unwritten have that shape.
- the recompute op's ``m`` and ``linv`` are the softmax statistics when a backward or an
  amax is asked for (bf16 for E4M3 inputs, as the bridge declares them), ``[1]`` otherwise;
  the plain op's ``P`` is the (fp8-rounded) probabilities in the inputs' dtype.

Masks, causality, ``valid_seq_len`` and grouped-query batch shapes are those of the bf16
fused attention (``kernels/attention.py``). Not modelled: the hardware's exponent and
reciprocal approximations (the "fast" softmax is exact here), dropout (refused with the
reason: the bridge's fp8 test runs none), and the fp8 backward op ``fp8_sdpa_bwd``.
fp8 inputs or an fp8 output need Gaudi2 or later.
"""

from __future__ import annotations

import torch

from hpu_emulator.kernels import attention, fp8
from hpu_emulator.kernels.checks import expect

Scale = torch.Tensor | float | None


def _factor(op: str, name: str, value: Scale) -> float | torch.Tensor | None:
    """A scale as a float32 scalar tensor (or float); None or the scalar forms' 0.0: absent,
    as the bridge passes a null tensor then."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        if value.numel() == 0:
            return None
        expect(value.numel() == 1, f"{op}: {name} must hold one value, got shape "
               f"{list(value.shape)} (the fused attention takes per-tensor scales)")
        return value.float().reshape(())
    return None if float(value) == 0.0 else float(value)


def _times(t: torch.Tensor, factor: float | torch.Tensor | None) -> torch.Tensor:
    return t if factor is None else t * factor


def _round(value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    bound = fp8.limit(dtype)
    return value.clamp(-bound, bound).to(dtype)


def _attention(op: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               attention_mask: torch.Tensor | None, p: float, scale: float, is_causal: bool,
               softmax_mode: str, scales: tuple[Scale, ...],
               valid_seq_len: torch.Tensor | None, seq_padding_type: str
               ) -> dict[str, torch.Tensor | None]:
    """Float32 probabilities (fp8-rounded for fp8 inputs), statistics and output."""
    attention._check(q, k, v, p, softmax_mode, seq_padding_type, op)
    expect(p == 0.0, f"{op}: dropout p={p} is not emulated in fp8 attention (the bridge's "
           "fp8 SDPA test runs without dropout); pass dropout_p=0.0")
    quantized = q.dtype in fp8.FP8
    if quantized:
        fp8._generation_checked(op)
    dq, dk, dv, qs, qo, ds = (_factor(op, name, value) for name, value in zip(
        ("d_scale_q", "d_scale_k", "d_scale_v", "q_scale_s", "q_scale_o", "d_scale_s"),
        scales, strict=True))
    keep = attention._keep_mask(q, k, is_causal, valid_seq_len, seq_padding_type)
    scores = attention._scores(_times(q.float(), dq), _times(k.float(), dk), attention_mask,
                               scale, keep)
    exps, m, linv = attention._stats(scores)
    probs = exps * linv
    weights = probs
    if quantized:
        weights = _times(_round(_times(probs, qs), q.dtype).float(), ds)
    out = torch.matmul(weights, _times(v.float(), dv))
    return {"probs": probs, "weights": weights, "m": m, "linv": linv, "out": out, "q_scale_o": qo}


def _amax(t: torch.Tensor, wanted: bool) -> torch.Tensor:
    value = t.abs().amax() if wanted else torch.zeros((), device=t.device)
    return value.reshape(1).float()


def _scaled_out(out: torch.Tensor, q_scale_o: float | torch.Tensor | None,
                dtype: torch.dtype) -> torch.Tensor:
    if dtype in fp8.FP8:
        return _round(_times(out, q_scale_o), dtype)
    return out.to(dtype)


def recomp_out_dtype(dtype: torch.dtype, q_scale_o: bool) -> torch.dtype:
    """The recompute op's output dtype (``Fp8SDPARecompFwd::AddNode``): E4M3 inputs give E4M3
    with ``q_scale_o`` and bf16 without; any other input dtype is kept."""
    if dtype == torch.float8_e4m3fn and not q_scale_o:
        return torch.bfloat16
    return dtype


def plain_out_dtype(dtype: torch.dtype, q_scale_o: bool) -> torch.dtype:
    """The plain op's output dtype (``Fp8SDPAFwd::AddNode``): float8 inputs give their dtype
    with ``q_scale_o`` and bf16 without; any other input dtype is kept."""
    if dtype in fp8.FP8 and not q_scale_o:
        return torch.bfloat16
    return dtype


def fp8_sdpa_recomp_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        attention_mask: torch.Tensor | None, p: float, scale: float,
                        is_causal: bool, requires_backward: bool, softmax_mode: str,
                        d_scale_q: Scale, d_scale_k: Scale, d_scale_v: Scale, q_scale_s: Scale,
                        q_scale_o: Scale, d_scale_s: Scale, is_amax_s: bool, is_amax_o: bool,
                        valid_seq_len: torch.Tensor | None, seq_padding_type: str
                        ) -> tuple[torch.Tensor, ...]:
    """``(out, m, linv, seed, amax_s, amax_o)``."""
    op = "fp8_sdpa_recomp_fwd"
    r = _attention(op, q, k, v, attention_mask, p, scale, is_causal, softmax_mode,
                   (d_scale_q, d_scale_k, d_scale_v, q_scale_s, q_scale_o, d_scale_s),
                   valid_seq_len, seq_padding_type)
    e4m3 = q.dtype == torch.float8_e4m3fn
    out_dtype = recomp_out_dtype(q.dtype, r["q_scale_o"] is not None)
    out = r["out"]
    seed = torch.zeros(1, dtype=torch.int32, device=q.device)
    if requires_backward or is_amax_s or is_amax_o:
        fast_bf16 = softmax_mode.lower() == "fast" and q.dtype == torch.bfloat16
        m_dtype = torch.bfloat16 if e4m3 else q.dtype
        linv_dtype = torch.bfloat16 if (fast_bf16 or e4m3) else torch.float32
        m, linv = r["m"].to(m_dtype), r["linv"].to(linv_dtype)
    else:
        m = torch.zeros(1, dtype=q.dtype, device=q.device)
        linv = torch.zeros(1, dtype=torch.float32, device=q.device)
    return (_scaled_out(out, r["q_scale_o"], out_dtype), m, linv, seed,
            _amax(r["probs"], is_amax_s), _amax(out, is_amax_o))


def fp8_sdpa_recomp_fwd_scalar(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                               attention_mask: torch.Tensor | None, p: float, scale: float,
                               is_causal: bool, requires_backward: bool, softmax_mode: str,
                               d_scale_q: float, d_scale_k: float, d_scale_v: float,
                               q_scale_s: float, q_scale_o: float, d_scale_s: float,
                               is_amax_s: bool, is_amax_o: bool,
                               valid_seq_len: torch.Tensor | None, seq_padding_type: str
                               ) -> tuple[torch.Tensor, ...]:
    """The ``.scalar`` form: a scale of 0.0 is an absent one, as the bridge reads it."""
    return fp8_sdpa_recomp_fwd(q, k, v, attention_mask, p, scale, is_causal, requires_backward,
                               softmax_mode, d_scale_q, d_scale_k, d_scale_v, q_scale_s,
                               q_scale_o, d_scale_s, is_amax_s, is_amax_o, valid_seq_len,
                               seq_padding_type)


def fp8_sdpa_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 attention_mask: torch.Tensor | None, p: float, scale: float, is_causal: bool,
                 softmax_mode: str, d_scale_q: Scale, d_scale_k: Scale, d_scale_v: Scale,
                 q_scale_s: Scale, q_scale_o: Scale, d_scale_s: Scale, is_amax_s: bool,
                 valid_seq_len: torch.Tensor | None, seq_padding_type: str
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(out, P, dm, amax_s)``; ``dm`` is an int8 ``[1]`` (no dropout)."""
    op = "fp8_sdpa_fwd"
    r = _attention(op, q, k, v, attention_mask, p, scale, is_causal, softmax_mode,
                   (d_scale_q, d_scale_k, d_scale_v, q_scale_s, q_scale_o, d_scale_s),
                   valid_seq_len, seq_padding_type)
    out_dtype = plain_out_dtype(q.dtype, r["q_scale_o"] is not None)
    if q.dtype in fp8.FP8:
        scaled = _round(_times(r["probs"], _factor(op, "q_scale_s", q_scale_s)), q.dtype)
    else:
        scaled = r["probs"].to(q.dtype)
    dm = torch.zeros(1, dtype=torch.int8, device=q.device)
    return (_scaled_out(r["out"], r["q_scale_o"], out_dtype), scaled, dm,
            _amax(r["probs"], is_amax_s))
