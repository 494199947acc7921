"""The one exception the emulator raises to activation."""

from __future__ import annotations

from hpu_plugin.errors import HpuPluginError


class EmulationError(HpuPluginError, RuntimeError):
    """The emulator cannot start; the message names the cause and the fix."""
