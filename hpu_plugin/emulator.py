"""The plugin's one door to the Gaudi emulator (the ``hpu-emulator`` distribution).

Activation and the diagnostics ask the emulator through these few functions only; nothing
else in ``hpu_plugin`` imports ``hpu_emulator``, and this module imports it only when it is
called, so a machine that never emulates never loads it. The emulator is optional: when
emulation is requested but ``hpu_emulator`` is not installed, :func:`check_settings` raises
:class:`EmulatorError` naming the install command, and activation turns the plugin off.
"""

from __future__ import annotations

from types import ModuleType

from hpu_plugin.errors import HpuPluginError

#: How to get the emulator, named in the error when it is missing.
INSTALL = "pip install 'hpu-plugin[emulator]'"


class EmulatorError(HpuPluginError, RuntimeError):
    """The emulator cannot start (or is not installed); the message names cause and fix."""


def _emulator() -> ModuleType:
    try:
        import hpu_emulator
    except ModuleNotFoundError as exc:
        if exc.name != "hpu_emulator":
            raise
        raise EmulatorError(
            "HPU_PLUGIN_EMULATE is set but the Gaudi emulator (hpu-emulator) is not installed; "
            f"fix: {INSTALL}, or unset HPU_PLUGIN_EMULATE") from None
    return hpu_emulator


def check_settings() -> None:
    """Refuse a missing emulator or a bad emulator setting before activation changes
    anything (:class:`EmulatorError`)."""
    emulator = _emulator()
    try:
        emulator.check_environment()
    except emulator.EmulationError as exc:
        raise EmulatorError(str(exc)) from exc


def start() -> None:
    """Bring the emulated Gaudi up (``torch.hpu``, its stand-ins on ``sys.path``); idempotent.
    Raises :class:`EmulatorError` when it cannot."""
    emulator = _emulator()
    try:
        emulator.start()
    except emulator.EmulationError as exc:
        raise EmulatorError(str(exc)) from exc
