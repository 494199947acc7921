"""PEFT: ``peft.utils.other.infer_device`` names ``hpu`` on Gaudi.

PEFT picks a device with ``infer_device()`` wherever the caller gave none: loading adapter
weights (``PeftModel.load_adapter`` and ``from_pretrained`` through
``set_peft_model_state_dict``/``load_peft_weights``), hotswapping, LoRA-FA and MonteCLoRA.
PEFT 0.21.2 knows cuda, mps, mlu, xpu and npu there, not hpu, so on Gaudi it answers
``cpu`` and the loaded weights (a ``modules_to_save`` copy loaded with
``low_cpu_mem_usage=True``) stay on the CPU while the model is on hpu. The replacement asks
PEFT's own function first and turns only its ``cpu`` into ``hpu`` when the registry says a
Gaudi is ready: CUDA or any other accelerator PEFT found keeps its answer.

Version-guarded: only the releases in :data:`~hpu_plugin.hosts.support.PEFT_TESTED`, whose
``infer_device`` (no arguments) was read and tested. Any other release is left as it is,
with one line saying why.
"""

from __future__ import annotations

import functools
import logging
import types
from collections.abc import Callable

from hpu_plugin import importhook
from hpu_plugin.gaudi.software import DEVICE_TYPE
from hpu_plugin.hosts.replacing import host_version, original_of, replace_everywhere
from hpu_plugin.hosts.support import PEFT_TESTED, release_key
from hpu_plugin.patching import Patches, ours, record_out
from hpu_plugin.registry import Registry
from hpu_plugin.reporting import say_once

HOST = "peft"
ADAPTER = "infer_device"


def known_release(version: str) -> bool:
    """Whether ``version`` is a PEFT release the adapter was tested on (local labels aside)."""
    key = release_key(version)
    return key is not None and any(key == release_key(tested) for tested in PEFT_TESTED)


def make_infer_device(registry: Registry, original: Callable[[], str]) -> Callable[[], str]:
    """PEFT's answer, with ``hpu`` instead of ``cpu`` when a Gaudi is ready."""

    @functools.wraps(original)
    def infer_device() -> str:
        device = original()
        if device == "cpu" and registry.device_available():
            return DEVICE_TYPE
        return device

    return ours(infer_device)


def _stay_out_of_release(version: str) -> None:
    tested = ", ".join(PEFT_TESTED)
    record_out(HOST, ADAPTER, f"peft {version} is not a tested release (tested: {tested})")
    say_once(
        f"stay-out:{HOST}:{ADAPTER}", logging.WARNING,
        "hpu_plugin: peft %s is not a release the infer_device adapter was tested on "
        "(tested: %s); it stays out, so PEFT loads adapter weights given no device onto the "
        "CPU: pass torch_device='hpu', or install peft==%s.", version, tested, PEFT_TESTED[-1],
    )


def install_infer_device(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    """Replace ``infer_device`` at its origin and in every module that imported it by name
    (``peft.utils``, ``peft.peft_model``, ``peft.utils.save_and_load``,
    ``peft.utils.hotswap``, ``peft.optimizers.lorafa``, ``peft.tuners.lora.monteclora``;
    ``peft.tuners.xlora.model`` imports it at call time, from the origin)."""
    version = host_version(HOST)
    if not known_release(version):
        _stay_out_of_release(version)
        return
    original = original_of(module, "infer_device", HOST, ADAPTER, "utils.other.infer_device")
    if original is None:
        return
    replace_everywhere(patches, original, make_infer_device(registry, original))


def install(registry: Registry, patches: Patches, available: bool) -> None:
    """Register the post-import hook; nothing at all when no device is ready (PEFT's own
    answer is then already right, and peft is never imported by the plugin)."""
    if not available:
        return
    importhook.when_imported(
        "peft.utils.other", lambda module: install_infer_device(registry, patches, module)
    )
