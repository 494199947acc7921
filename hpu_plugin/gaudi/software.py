"""Which Gaudi software is installed: the real stack, or only the emulator's stand-ins.

A fact about the machine, asked by activation (should the plugin wake up?), by the emulator
(it must never shadow the real stack) and by the diagnostics. It lives here, below all of
them, so none of them imports another to learn it. Cheap: one ``find_spec``, no import.
"""

from __future__ import annotations

import importlib.util
import os

#: The emulator's stand-ins for ``habana_frameworks``; never mistaken for the real package.
STANDINS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "emulation", "standins"
)

#: The torch device type the Gaudi software registers (``torch.hpu``, ``device="hpu"``).
DEVICE_TYPE = "hpu"

#: The distribution of the real Gaudi software (imported as ``habana_frameworks``).
GAUDI_DISTRIBUTION = "habana-torch-plugin"


def real_gaudi_installed() -> bool:
    """Is the real ``habana_frameworks`` importable (the emulator's stand-ins do not count)?"""
    spec = importlib.util.find_spec("habana_frameworks")
    if spec is None:
        return False
    locations = list(spec.submodule_search_locations or []) or [spec.origin or ""]
    return not all(os.path.abspath(path).startswith(STANDINS) for path in locations)
