"""A CPU-backed emulation of the Gaudi software stack (opt-in: HPU_PLUGIN_EMULATE).

Kept cheap to import: everything heavy is imported by :func:`start`.
"""

from __future__ import annotations

from hpu_plugin.emulation.errors import EmulationError

__all__ = ["EmulationError", "start"]


def start() -> None:
    """Bring up the emulated Gaudi server; idempotent.

    Raises EmulationError (one line: cause and fix) when it cannot, leaving torch untouched.
    """
    from hpu_plugin.emulation.runtime import start as _start

    _start()
