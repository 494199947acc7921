"""Numerics against the CPU: common ops and a tiny Llama's logits, computed on ``hpu`` and on
the CPU from the same inputs, agree within the tolerances stated here.

The measure is the relative L2 error ``|hpu - cpu| / |cpu|``. Gaudi's kernels are not the
CPU's (other accumulation orders, approximated transcendental functions), so the bounds
leave room for last-bit differences: float32 elementwise 1e-4; float32 matmul-like (MME,
long reductions) 5e-3, which admits a matrix engine that multiplies float32 with a
TF32-class 10-bit mantissa (2**-11 = 4.9e-4 per product) but not a wrong result; bfloat16
(8 bits of mantissa, 2**-8 = 3.9e-3 per rounding, compounded through a model) 3e-2.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hpu_plugin.selftest import tiny
from hpu_plugin.selftest.harness import acquire, require, run

FP32_ELEMENTWISE, FP32_MATMUL, BF16 = 1e-4, 5e-3, 3e-2


def _cases(torch: Any) -> list[tuple[str, float, Callable[..., Any], list[Any]]]:
    f = torch.nn.functional
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 96, generator=g), torch.randn(96, 48, generator=g)
    x = torch.randn(8, 128, generator=g)
    image = torch.randn(2, 3, 16, 16, generator=g)
    kernel = torch.randn(4, 3, 3, 3, generator=g)
    labels = torch.randint(0, 128, (8,), generator=g)
    w = torch.randn(128, generator=g)
    return [
        ("add_mul fp32", FP32_ELEMENTWISE, lambda x: x * 1.5 + x, [x]),
        ("exp fp32", FP32_ELEMENTWISE, torch.exp, [x]),
        ("tanh fp32", FP32_ELEMENTWISE, torch.tanh, [x]),
        ("gelu fp32", FP32_ELEMENTWISE, f.gelu, [x]),
        ("silu fp32", FP32_ELEMENTWISE, f.silu, [x]),
        ("softmax fp32", FP32_ELEMENTWISE, lambda x: torch.softmax(x, -1), [x]),
        ("layer_norm fp32", FP32_MATMUL, lambda x, w: f.layer_norm(x, (128,), w), [x, w]),
        ("matmul fp32", FP32_MATMUL, torch.matmul, [a, b]),
        ("conv2d fp32", FP32_MATMUL, f.conv2d, [image, kernel]),
        ("sum fp32", FP32_MATMUL, lambda x: x.sum(-1), [x]),
        ("cross_entropy fp32", FP32_MATMUL, f.cross_entropy, [x, labels]),
        ("matmul bf16", BF16, torch.matmul, [a.bfloat16(), b.bfloat16()]),
        ("softmax bf16", BF16, lambda x: torch.softmax(x, -1), [x.bfloat16()]),
    ]


def _error(torch: Any, got: Any, want: Any) -> float:
    got, want = got.detach().float().cpu(), want.detach().float()
    return float((got - want).norm() / want.norm().clamp_min(1e-12))


def body() -> tuple[str, dict[str, Any]]:
    torch = acquire()
    errors: dict[str, float] = {}
    bad = []
    for name, tolerance, op, args in _cases(torch):
        errors[name] = _error(torch, op(*(t.to("hpu") for t in args)), op(*args))
        if not errors[name] <= tolerance:
            bad.append(f"{name} {errors[name]:.1e} > {tolerance:g}")
    model = tiny.model()
    ids = torch.randint(3, len(tiny.WORDS) + 3, (2, 16), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = model(ids).logits
        got = model.to("hpu")(ids.to("hpu")).logits
        errors["llama logits fp32"] = _error(torch, got, want)
        with torch.autocast("hpu", dtype=torch.bfloat16):
            got_bf16 = model(ids.to("hpu")).logits
        with torch.autocast("cpu", dtype=torch.bfloat16):
            want_bf16 = model.to("cpu")(ids).logits
        errors["llama logits bf16 autocast"] = _error(torch, got_bf16, want_bf16)
    logits = (("llama logits fp32", FP32_MATMUL), ("llama logits bf16 autocast", BF16))
    for name, tolerance in logits:
        if not errors[name] <= tolerance:
            bad.append(f"{name} {errors[name]:.1e} > {tolerance:g}")
    require(not bad, "beyond tolerance: " + "; ".join(bad))
    worst = max(errors, key=lambda name: errors[name])
    return (
        f"{len(errors)} comparisons within tolerance (largest: {worst} {errors[worst]:.1e})",
        {"relative_errors": errors,
         "tolerances": {"fp32_elementwise": FP32_ELEMENTWISE, "fp32_matmul": FP32_MATMUL,
                        "bf16": BF16}},
    )


if __name__ == "__main__":
    run("numerics", body)
