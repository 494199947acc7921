"""The stand-ins on ``sys.path`` from interpreter start, when emulation is requested.

On a Gaudi machine ``habana_frameworks`` is importable from the first line of a program:
Gaudi's own documents start scripts with ``import habana_frameworks.torch.core`` before
``import torch``, and Transformers' ``is_torch_hpu_available`` looks for it with
``find_spec`` before torch is loaded. The emulator's stand-ins must be found as early, so the
one line in ``hpu_emulator.pth`` (installed by this distribution only, never by hpu-plugin)
calls :func:`add_standins` at interpreter start. With ``HPU_PLUGIN_EMULATE`` unset it costs
one environment look-up and imports nothing. Never raises: an error in a ``.pth`` line would
print on every interpreter start.
"""

from __future__ import annotations

import logging
import os

#: PyTorch's own switch for backend autoload: any value but "1" turns it off, and then
#: nothing starts the emulator inside ``import torch``.
TORCH_AUTOLOAD = "TORCH_DEVICE_BACKEND_AUTOLOAD"


def add_standins() -> None:
    """Put the stand-ins on ``sys.path`` unless the emulator could not start in this process
    (the plugin switched off, backend autoload off, the real Gaudi software installed): hosts
    that find ``habana_frameworks`` take their Gaudi branches, into a device that must then
    exist. Activation takes them back if the emulator does not start after all."""
    try:
        from hpu_plugin import settings
        from hpu_plugin.gaudi.software import real_gaudi_installed

        if not settings.emulation_requested() or settings.is_on(
                os.environ.get("HPU_PLUGIN_DISABLE")):
            return
        if os.environ.get(TORCH_AUTOLOAD, "1") != "1":
            from hpu_plugin.reporting import say_once

            say_once(  # once: site may read a venv's .pth files twice
                TORCH_AUTOLOAD, logging.WARNING,
                "hpu_emulator: HPU_PLUGIN_EMULATE is set but %s=%r turns off PyTorch's "
                "backend autoload, so the Gaudi emulator does not start; unset %s (or set it "
                "to 1) to emulate, or unset HPU_PLUGIN_EMULATE.",
                TORCH_AUTOLOAD, os.environ[TORCH_AUTOLOAD], TORCH_AUTOLOAD,
            )
            return
        if not real_gaudi_installed():
            from hpu_emulator import runtime

            runtime.add_standins()
    except Exception as exc:
        logging.getLogger("hpu_plugin").error(
            "hpu_emulator: could not add the emulator's stand-ins to sys.path: %r", exc)
