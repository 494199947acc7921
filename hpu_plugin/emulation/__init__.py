"""A CPU-backed emulation of the Gaudi software stack (opt-in: HPU_PLUGIN_EMULATE)."""

from __future__ import annotations


class EmulationError(RuntimeError):
    """The emulator cannot start; the message names the cause and the fix."""


def start() -> None:
    raise EmulationError("the Gaudi emulator is not built yet")
