"""ATen ops whose results on Gaudi differ from the CPU kernel the emulator runs underneath:
for these the HPU dispatch key gets a kernel with the bridge's numerics, so code tested on
the emulator sees what a Gaudi returns.

- ``_scaled_mm``: the bridge multiplies by ``scale_result`` (torch's CPU kernel divides) and
  saturates an fp8 result at the generation's limit (:func:`hpu_emulator.kernels.fp8.scaled_mm`).
"""

from __future__ import annotations

import warnings

from hpu_emulator import ops
from hpu_emulator.kernels import fp8


def register() -> None:
    with ops.lock:
        if ops.registered(__name__):
            return
        library = ops.library(__name__, "aten", "IMPL")
        with warnings.catch_warnings():  # "Overriding a previously registered kernel"
            warnings.simplefilter("ignore", UserWarning)
            library.impl("_scaled_mm", fp8.scaled_mm, "HPU")


def unregister() -> None:
    ops.drop(__name__)
