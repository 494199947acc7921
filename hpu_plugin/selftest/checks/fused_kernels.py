"""Gaudi's fused kernels against unfused torch: ``hpex.kernels.FusedSDPA`` (causal and
grouped-query attention, recompute on and off, forward and backward) against
``scaled_dot_product_attention`` on the CPU, ``hpex.normalization.FusedRMSNorm`` against a
plain RMSNorm, and one refusal of FusedSDPA with the bridge's message.

The emulator's kernels follow the bridge's Python sources and documented formulas; this
check is where real Gaudi confirms them. The measure is the relative L2 error; bounds as in
the ``numerics`` check: float32 5e-3 (matrix engine, long reductions), bfloat16 3e-2.
"""

from __future__ import annotations

from typing import Any

from hpu_plugin.selftest.harness import acquire, require, run

FP32, BF16 = 5e-3, 3e-2
VALID_LENGTHS_REFUSAL = (
    "Valid sequence length is supported only in inference with is_causal(triangular) mask case"
)


def _error(got: Any, want: Any) -> float:
    got, want = got.detach().float().cpu(), want.detach().float()
    return float((got - want).norm() / want.norm().clamp_min(1e-12))


def _worst(outputs: tuple[Any, Any], grads: Any, wants: Any) -> float:
    """Largest error of the output and of each input's gradient."""
    pairs = [outputs, *zip(grads, wants, strict=True)]
    return max(_error(got, want) for got, want in pairs)


def _attention(torch: Any, fused_sdpa: Any, errors: dict[str, float]) -> None:
    f = torch.nn.functional
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 32, 16, generator=g)
    k, v = torch.randn(2, 2, 32, 16, generator=g), torch.randn(2, 2, 32, 16, generator=g)
    dout = torch.randn(2, 4, 32, 16, generator=g)
    for dtype, label in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        for recompute in (True, False):
            cpu = [t.to(dtype).requires_grad_() for t in (q, k, v)]
            dev = [t.to(dtype).to("hpu").requires_grad_() for t in (q, k, v)]
            out = fused_sdpa.apply(*dev, None, 0.0, True, None, "None", recompute)
            ref = f.scaled_dot_product_attention(*cpu, is_causal=True, enable_gqa=True)
            got = torch.autograd.grad(out, dev, dout.to(dtype).to("hpu"))
            want = torch.autograd.grad(ref, cpu, dout.to(dtype))
            name = f"FusedSDPA causal GQA {label} recompute={recompute}"
            errors[name] = _worst((out, ref), got, want)


def _rms_norm(torch: Any, fused_rms_norm: Any, errors: dict[str, float]) -> None:
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(4, 8, 64, generator=g), torch.randn(64, generator=g)
    dout = torch.randn(4, 8, 64, generator=g)
    for dtype, label in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        cpu = [t.to(dtype).requires_grad_() for t in (x, w)]
        dev = [t.to(dtype).to("hpu").requires_grad_() for t in (x, w)]
        out = fused_rms_norm.apply(*dev, 1e-6)
        xf = cpu[0].float()
        ref = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
               * cpu[1].float()).to(dtype)
        got = torch.autograd.grad(out, dev, dout.to(dtype).to("hpu"))
        want = torch.autograd.grad(ref, cpu, dout.to(dtype))
        errors[f"FusedRMSNorm {label}"] = _worst((out, ref), got, want)


def body() -> tuple[str, dict[str, Any]]:
    torch = acquire()
    from habana_frameworks.torch.hpex.kernels import FusedSDPA
    from habana_frameworks.torch.hpex.normalization import FusedRMSNorm

    errors: dict[str, float] = {}
    _attention(torch, FusedSDPA, errors)
    _rms_norm(torch, FusedRMSNorm, errors)
    bad = [f"{name} {err:.1e} > {BF16 if 'bf16' in name else FP32:g}"
           for name, err in errors.items() if not err <= (BF16 if "bf16" in name else FP32)]
    require(not bad, "beyond tolerance: " + "; ".join(bad))
    q = torch.randn(1, 2, 8, 16, device="hpu", requires_grad=True)
    try:
        FusedSDPA.apply(q, q, q, None, 0.0, True, None, "None", False,
                        torch.tensor([8], device="hpu"))
        refusal = "accepted"
    except AssertionError as exc:
        refusal = str(exc)
    require(refusal == VALID_LENGTHS_REFUSAL,
            f"FusedSDPA with valid_seq_len in training: expected the assertion "
            f"{VALID_LENGTHS_REFUSAL!r}, got {refusal!r}")
    worst = max(errors, key=lambda name: errors[name])
    return (
        f"{len(errors)} fused-kernel comparisons within tolerance (largest: {worst} "
        f"{errors[worst]:.1e}); FusedSDPA refuses as the bridge",
        {"relative_errors": errors, "tolerances": {"fp32": FP32, "bf16": BF16}},
    )


if __name__ == "__main__":
    run("fused-kernels", body)
