"""Whether the end-to-end tests here can run: they need the emulator and host adapters.

Decided by what the code base has, not by trying (a failing emulator must fail these
tests, not skip them).
"""

from __future__ import annotations

import importlib.util

import pytest


def _landed() -> str | None:
    missing = [
        name for name in ("hpu_plugin.emulation.runtime", "hpu_plugin.hosts.torch_adapter",
                          "hpu_plugin.hosts.transformers_adapter")
        if importlib.util.find_spec(name) is None
    ]
    if missing:
        return (
            "needs the Gaudi emulator (branch emu) and the host adapters (branch hosts) on "
            f"main; missing: {', '.join(missing)}"
        )
    return None


MISSING = _landed()
needs_emulator = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
