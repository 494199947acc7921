"""Which Gaudi software is installed: the real stack, or only the emulator's stand-ins.

A fact about the machine, asked by activation (should the plugin wake up?), by the emulator
(it must never shadow the real stack) and by the diagnostics. It lives here, below all of
them, so none of them imports another to learn it. Cheap: one ``find_spec``, no import.
"""

from __future__ import annotations

import importlib.util
import os

#: The file an emulator's stand-in package carries at its top (``habana_frameworks/``),
#: so that it is never mistaken for the real package, wherever it is installed.
STANDIN_MARKER = "HPU_EMULATOR_STANDIN"

#: The torch device type the Gaudi software registers (``torch.hpu``, ``device="hpu"``).
DEVICE_TYPE = "hpu"

#: The distribution of the real Gaudi software (imported as ``habana_frameworks``).
GAUDI_DISTRIBUTION = "habana-torch-plugin"


def is_standin(location: str) -> bool:
    """Is the package at ``location`` (its directory, or its ``__init__.py``) an emulator's
    stand-in rather than the real Gaudi software? Stand-ins carry :data:`STANDIN_MARKER`."""
    directory = location if os.path.isdir(location) else os.path.dirname(location)
    return os.path.isfile(os.path.join(directory, STANDIN_MARKER))


def real_gaudi_installed() -> bool:
    """Is the real ``habana_frameworks`` importable (the emulator's stand-ins do not count)?"""
    spec = importlib.util.find_spec("habana_frameworks")
    if spec is None:
        return False
    locations = list(spec.submodule_search_locations or []) or [spec.origin or ""]
    return not all(is_standin(path) for path in locations)
