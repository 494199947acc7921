"""The emulator on a CUDA build of torch: what ``pip install torch`` gives on Linux x86-64.

torch (2.7 on) picks "the" accelerator from the device types built in, CUDA first, and
refuses a second one ("Cannot have both HPU and cuda."); a CUDA build counts as built, GPU
or not. A Gaudi never has a CUDA build, so there the accelerator is ``hpu``, and torch's
device-generic code relies on it: the autograd engine syncs each gradient of an hpu tensor
on the accelerator's stream, ``pin_memory()`` (the DataLoader's, so Trainer's default) pins
for the accelerator, ``torch.accelerator`` answers for it. The emulator's HPU hooks say
"built" only when CUDA's do not (``csrc/emulator.cpp``), so torch's C++ never raises, and:

- no GPU visible: nothing CUDA can run, so CUDA's hooks are made to answer "not built", as
  on a CPU build (``stand_down_absent_cuda``). ``hpu`` is then the accelerator everywhere,
  as on Gaudi. If that cannot be done, one warning says what fails and the fix.
- a GPU visible: the user's CUDA stays the user's. The accelerator stays ``cuda``; the
  emulated Gaudi is ``device="hpu"`` and ``torch.hpu``, for inference: torch's autograd
  engine cannot train on a device that is not the accelerator. Said once, at start.
"""

from __future__ import annotations

import logging

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


def install() -> str:
    """Make ``hpu`` the accelerator on a CUDA build with no GPU; returns what was done ("" on
    a CPU build)."""
    if not is_cuda_build():
        return ""
    if _gpu_visible():
        log.warning(
            "hpu_emulator: this torch is a CUDA build and a GPU is visible: the accelerator "
            "stays cuda (your GPU); the emulated Gaudi is device='hpu' and torch.hpu, and "
            "backward() on hpu tensors fails (torch syncs gradients on the accelerator). Hide "
            "the GPU (CUDA_VISIBLE_DEVICES='') for hpu to be the accelerator, as on Gaudi."
        )
        return "gpu visible: the accelerator stays cuda"
    reason = runtime.extension().stand_down_absent_cuda()
    if reason:
        log.warning(
            "hpu_emulator: on this CUDA build of torch the accelerator stays cuda (%s): "
            "backward() and pin_memory() on hpu fail. Install torch's CPU build "
            "(--index-url https://download.pytorch.org/whl/cpu) to emulate training.",
            reason,
        )
        return f"no gpu: the accelerator stays cuda ({reason})"
    return "no gpu: the accelerator is hpu"
