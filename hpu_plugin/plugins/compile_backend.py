"""Compile-backend interceptor: on Gaudi, ``torch.compile`` uses ``hpu_backend``.

Inductor has no HPU code generator, so a default ``torch.compile`` cannot work on Gaudi;
the Gaudi software supports ``hpu_backend`` and ``eager`` only (Gaudi support matrix), and
only in eager mode (``hpu_plugin.gaudi.modes``). A backend the user registered with Dynamo
under a name of their own is kept, as a backend function passed directly is.
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
    if callable(requested) or requested in SUPPORTED or _registered_outside_torch(requested):
        return None  # the caller's own backend, or one Gaudi supports
    return "hpu_backend"


def _registered_outside_torch(name: str | None) -> bool:
    """A backend name someone registered with Dynamo (``@register_backend``): the user's
    own choice, as a backend function passed directly is. torch's own names (``inductor``,
    which the hosts pass by default, ``cudagraphs``...) have no Gaudi code generator."""
    if name is None:
        return False
    try:
        from torch._dynamo.backends.registry import lookup_backend

        module = getattr(lookup_backend(name), "__module__", None) or "torch"
    except Exception:  # unknown to Dynamo: torch.compile names it in its own error
        return False
    return module.partition(".")[0] != "torch"
