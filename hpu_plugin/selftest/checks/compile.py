"""``torch.compile`` on Gaudi: a default call (which asks for Inductor, which cannot run on
``hpu``) and an explicit ``backend="hpu_backend"`` both compile and match eager results."""

from __future__ import annotations

from typing import Any

from hpu_plugin.selftest.harness import acquire, require, run

#: Relative L2 error allowed between compiled and eager results (fp32): the compiled graph
#: may fuse or reorder, which changes the last bits only.
TOLERANCE = 1e-4


def _relative_error(got: Any, want: Any) -> float:
    got, want = got.float().cpu(), want.float().cpu()
    return float((got - want).norm() / want.norm().clamp_min(1e-12))


def body() -> tuple[str, dict[str, Any]]:
    torch = acquire()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.LayerNorm(64), torch.nn.Linear(64, 8)
    ).to("hpu")
    x = torch.randn(4, 32).to("hpu")
    with torch.no_grad():
        eager = model(x)
        errors = {}
        for label, compiled in (
            ("default", torch.compile(model)),
            ("hpu_backend", torch.compile(model, backend="hpu_backend")),
        ):
            out = compiled(x)
            require(out.device.type == "hpu", f"{label}: the compiled output is on {out.device}")
            errors[label] = _relative_error(out, eager)
            require(
                errors[label] <= TOLERANCE,
                f"{label}: compiled and eager differ by {errors[label]:.2e} (> {TOLERANCE})",
            )
    counters = getattr(getattr(torch, "_dynamo", None), "utils", None)
    graphs = None
    if counters is not None and hasattr(counters, "counters"):
        graphs = int(counters.counters["stats"].get("unique_graphs", 0))
        require(graphs >= 1, "torch.compile ran no graph: dynamo fell back to eager")
    return (
        f"default and hpu_backend compile, max error {max(errors.values()):.1e}",
        {"relative_errors": errors, "unique_graphs": graphs},
    )


if __name__ == "__main__":
    run("compile", body)
