"""Lazy and eager execution and what each allows.

Eager (``PT_HPU_LAZY_MODE=0``) runs ops as they come and is the only mode with
``torch.compile``: the Gaudi support matrix lists ``hpu_backend`` and ``eager`` as
supported in eager mode and nothing in lazy mode. Lazy mode accumulates a graph until
``mark_step``; int64 stays int64 there only with ``PT_ENABLE_INT64_SUPPORT=1``
(``generations.int64_on_device`` has that rule).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hpu_plugin.gaudi.config_error import GaudiConfigError
from hpu_plugin.gaudi.environment import LAZY_MODE, parse_lazy_mode


@dataclass(frozen=True)
class Mode:
    name: str  # "lazy" | "eager"
    compile: bool  # torch.compile works
    compile_backends: tuple[str, ...]  # backends Gaudi supports in this mode


LAZY = Mode("lazy", compile=False, compile_backends=())
EAGER = Mode("eager", compile=True, compile_backends=("hpu_backend", "eager"))


class CompileModeError(GaudiConfigError):
    """``torch.compile`` asked for in lazy mode."""


def mode(environ: Mapping[str, str]) -> Mode:
    """The mode the Gaudi software will run in; raises for a value it would misread."""
    return LAZY if parse_lazy_mode(environ.get(LAZY_MODE)) else EAGER


def check_compile(environ: Mapping[str, str]) -> None:
    """Raise before compiling when ``torch.compile`` cannot work (lazy mode)."""
    if mode(environ).compile:
        return
    raise CompileModeError(
        LAZY_MODE,
        environ.get(LAZY_MODE),
        "torch.compile only in eager mode (PT_HPU_LAZY_MODE=0)",
        f"set {LAZY_MODE}=0 before starting Python (or unset it: the plugin then sets 0), "
        "or do not call torch.compile (TrainingArguments(torch_compile=False))",
        problem="torch.compile does not work in Gaudi lazy mode",
    )
