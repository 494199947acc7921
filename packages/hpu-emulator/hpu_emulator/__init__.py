"""A CPU-backed emulation of the Gaudi software stack (opt-in: HPU_PLUGIN_EMULATE).

Kept cheap to import: everything heavy is imported by :func:`start`. Two modules hold the
rest together: ``startup`` brings the emulator up (it imports the parts it starts), and
``runtime`` is the state they share (configuration, C++ runtime, ``patches``), importing
none of them, so the parts import it at their top and no import goes in a circle.
"""

from __future__ import annotations

import os

from hpu_emulator.errors import EmulationError

__all__ = ["EmulationError", "check_environment", "start"]


def start() -> None:
    """Bring up the emulated Gaudi server; idempotent.

    Raises EmulationError (one line: cause and fix) when it cannot, leaving torch untouched.
    """
    from hpu_emulator.startup import start as _start

    _start()


def check_environment() -> None:
    """Refuse a bad emulator setting before activation changes anything (EmulationError).

    Reads only what does not depend on the Gaudi defaults activation is about to export:
    the generation, the server, memory and the launcher's rank variables.
    """
    from hpu_emulator import config

    config.server()
    config.check_launcher_variables(os.environ)
    config.check_metrics_variables(os.environ)
