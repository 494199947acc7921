"""Compile-backend interceptor: on Gaudi, ``torch.compile`` uses ``hpu_backend``.

Inductor has no HPU code generator, so a default ``torch.compile`` cannot work on Gaudi;
the Gaudi software supports ``hpu_backend`` and ``eager`` only (Gaudi support matrix), and
only in eager mode.
"""

from __future__ import annotations

import os

from hpu_plugin.gaudi.environment import is_lazy
from hpu_plugin.hookspecs import CompileBackend, Refusal, hookimpl

SUPPORTED = ("hpu_backend", "eager")


@hookimpl
def hpu_compile_backend(requested: CompileBackend | None, device_type: str) -> CompileBackend | None:
    if device_type != "hpu":
        return None
    if is_lazy(os.environ):
        raise Refusal(
            f"torch.compile does not work in Gaudi lazy mode (PT_HPU_LAZY_MODE="
            f"{os.environ.get('PT_HPU_LAZY_MODE', '1')!r}): set PT_HPU_LAZY_MODE=0 before "
            "starting Python, or do not call torch.compile."
        )
    if callable(requested) or requested in SUPPORTED:
        return None  # the caller's own backend function, or one Gaudi supports
    return "hpu_backend"
