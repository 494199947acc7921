"""Whether the end-to-end tests here can run: they need the emulator, and the host
decision tests also the host adapters.

Decided by what the code base has, not by trying (a failing emulator must fail these
tests, not skip them).
"""

from __future__ import annotations

import importlib.util

import pytest


def _missing(*modules: str) -> str | None:
    absent = [name for name in modules if importlib.util.find_spec(name) is None]
    if absent:
        return f"not in this tree yet: {', '.join(absent)}"
    return None


EMULATOR = ("hpu_plugin.emulation.runtime",)
HOSTS = ("hpu_plugin.hosts.torch_adapter", "hpu_plugin.hosts.transformers_adapter")

_no_emulator = _missing(*EMULATOR)
_no_hosts = _missing(*EMULATOR, *HOSTS)
needs_emulator = pytest.mark.skipif(
    _no_emulator is not None, reason=f"needs the Gaudi emulator (branch emu); {_no_emulator}"
)
needs_hosts = pytest.mark.skipif(
    _no_hosts is not None,
    reason=f"needs the emulator (branch emu) and the host adapters (branch hosts); {_no_hosts}",
)
