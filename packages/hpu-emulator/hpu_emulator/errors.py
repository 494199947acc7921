"""The one exception the emulator raises to activation."""

from __future__ import annotations


class EmulationError(RuntimeError):
    """The emulator cannot start; the message names the cause and the fix."""
