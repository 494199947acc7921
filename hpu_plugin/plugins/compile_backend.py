"""Compile-backend interceptor: on Gaudi, ``torch.compile`` uses ``hpu_backend``.

Inductor has no HPU code generator, so a default ``torch.compile`` cannot work on Gaudi;
the Gaudi software supports ``hpu_backend`` and ``eager`` only (Gaudi support matrix), and
only in eager mode (``hpu_plugin.gaudi.modes``).
"""

from __future__ import annotations

import os

from hpu_plugin.gaudi.modes import EAGER, check_compile
from hpu_plugin.hookspecs import CompileBackend, hookimpl

SUPPORTED = EAGER.compile_backends


@hookimpl
def hpu_compile_backend(
    requested: CompileBackend | None
) -> CompileBackend | None:
    check_compile(os.environ)  # lazy mode: a Refusal naming PT_HPU_LAZY_MODE and the fix
    if callable(requested) or requested in SUPPORTED:
        return None  # the caller's own backend function, or one Gaudi supports
    return "hpu_backend"
