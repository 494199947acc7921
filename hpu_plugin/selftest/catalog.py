"""The checks: name, module, time limit, and how many Gaudi modules each needs.

Limits are generous for real Gaudi, where the first graph compilation of a model takes
seconds; on the emulator each check takes a few seconds. ``--time-limit`` overrides them.
"""

from __future__ import annotations

from dataclasses import dataclass

PACKAGE = "hpu_plugin.selftest.checks"


@dataclass(frozen=True)
class Check:
    name: str
    module: str  # under hpu_plugin.selftest.checks
    limit: float  # seconds before the check's processes are ended
    modules_needed: int
    what: str

    @property
    def target(self) -> str:
        return f"{PACKAGE}.{self.module}"


CHECKS = (
    Check("detect", "detect", 120, 1, "device and generation detection"),
    Check("reference-page", "reference_page", 600, 1, "the Transformers Gaudi page's examples"),
    Check("compile", "compile", 300, 1, "torch.compile through hpu_backend"),
    Check("bf16-training", "bf16_training", 300, 1, "bf16 training steps"),
    Check("bitsandbytes-nf4", "nf4", 300, 1, "bitsandbytes NF4 placement and forward"),
    Check("hccl", "hccl", 300, 2, "a 2-process hccl job"),
    Check("accelerate-barrier", "accelerate_barrier", 300, 2, "Accelerate wait_for_everyone"),
    Check("graph-compilations", "graph_compilations", 600, 1, "graph compilations of generate"),
    Check("numerics", "numerics", 300, 1, "numerics against the CPU"),
    Check("fused-kernels", "fused_kernels", 300, 1, "hpex FusedSDPA and FusedRMSNorm vs torch"),
    Check("hpu-graphs", "hpu_graphs", 300, 1, "HPU graph capture, replay and wrap_in_hpu_graph"),
)
NAMES = tuple(check.name for check in CHECKS)


def select(only: list[str] | None, skip: list[str] | None) -> list[Check]:
    """The checks to run, in catalogue order; an unknown name is an error naming the choices."""
    for name in [*(only or []), *(skip or [])]:
        if name not in NAMES:
            raise ValueError(f"unknown check {name!r}; the checks are: {', '.join(NAMES)}")
    return [
        c for c in CHECKS if (not only or c.name in only) and c.name not in (skip or [])
    ]
