"""The emulator on a CUDA build of torch: what ``pip install torch`` gives on Linux x86-64.

torch (2.7 on) picks "the" accelerator from the device types built in, CUDA first, and
refuses a second one ("Cannot have both HPU and cuda."); a CUDA build always counts as
built, GPU or not. A Gaudi never has a CUDA build, so there ``torch.accelerator`` is ``hpu``.
Here the emulator's HPU hooks say "not built" on a CUDA build (``csrc/emulator.cpp``), so
that torch's C++ never raises, and then:

- no GPU visible: ``torch.accelerator`` answers for ``hpu``, as on Gaudi. Its Python entry
  points (``torch._C._accelerator_*``, ``torch._C._get_accelerator``) are routed to
  ``torch.hpu``; torch's own C++ callers of the accelerator see CUDA's default, which no
  emulated program reaches (they serve CUDA graphs, CUDA's allocator, pinned host memory
  without a device).
- a GPU visible: the user's CUDA stays the user's. ``torch.accelerator`` stays ``cuda``;
  the emulated Gaudi is ``device="hpu"`` and ``torch.hpu``. Said once, at start.

The memory functions of ``torch.accelerator`` (``memory_stats``, ``empty_cache``) are not
routed: on every build they need a device allocator the emulator does not register, so
they fail alike (``torch.hpu.memory_stats`` answers instead).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from hpu_emulator import runtime

log = logging.getLogger("hpu_plugin")


def is_cuda_build() -> bool:
    return getattr(torch.version, "cuda", None) is not None or getattr(
        torch.version, "hip", None
    ) is not None


def _gpu_visible() -> bool:
    try:
        return torch.cuda.device_count() > 0
    except Exception:  # a broken driver: no GPU this process can use
        return False


def _exchange(index: int) -> int:
    old = torch.hpu.current_device()
    if index >= 0 and index != old:
        torch.hpu.set_device(index)
    return old


def _routes() -> dict[str, Any]:
    hpu = torch.hpu

    def get_accelerator(*_: Any) -> torch.device:
        return torch.device("hpu")

    def set_stream(stream: Any) -> None:
        hpu.set_stream(stream)

    return {
        "_accelerator_getAccelerator": get_accelerator,
        "_get_accelerator": get_accelerator,
        "_accelerator_getDeviceIndex": hpu.current_device,
        "_accelerator_setDeviceIndex": hpu.set_device,
        "_accelerator_exchangeDevice": _exchange,
        "_accelerator_maybeExchangeDevice": _exchange,
        "_accelerator_getStream": hpu.current_stream,
        "_accelerator_setStream": set_stream,
        "_accelerator_synchronizeDevice": hpu.synchronize,
    }


def install() -> str:
    """Route ``torch.accelerator`` on a CUDA build; returns what was done ("" on a CPU build)."""
    if not is_cuda_build():
        return ""
    if _gpu_visible():
        log.warning(
            "hpu_emulator: this torch is a CUDA build and a GPU is visible: torch.accelerator "
            "stays cuda (your GPU); the emulated Gaudi is device='hpu' and torch.hpu. Hide "
            "the GPU (CUDA_VISIBLE_DEVICES='') for torch.accelerator to be hpu, as on Gaudi."
        )
        return "gpu visible: torch.accelerator stays cuda"
    for name, route in _routes().items():
        if hasattr(torch._C, name):
            runtime.patches.set(torch._C, name, route)
    return "no gpu: torch.accelerator is hpu"
