"""Start-up of the emulator: configuration, C++ runtime, ``torch.hpu``, stand-ins, shims.

Runs inside ``import torch`` (the activation entry point), so it imports no torch._dynamo and
no torch.distributed eagerly.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from pathlib import Path
from types import ModuleType

from hpu_plugin.emulation import config as _config
from hpu_plugin.emulation.errors import EmulationError
from hpu_plugin.gaudi.software import STANDINS as _STANDINS
from hpu_plugin.gaudi.software import real_gaudi_installed
from hpu_plugin.patching import Patches

STANDINS = Path(_STANDINS)

_state: dict[str, object] = {}
#: What the emulator changed outside its own modules (``torch.manual_seed``, ``PATH``),
#: recorded and undone like the host adapters' patches (``patches.made`` lists them).
patches = Patches()


def prepend_to_path(directory: str, why: str) -> None:
    """Put ``directory`` first on ``PATH`` for this process and its children (they run
    ``why``, e.g. ``hl-smi``, by name), through :data:`patches`."""
    path = os.environ.get("PATH", "")
    patches.set_item(os.environ, "PATH", directory + os.pathsep + path,
                     f"os.environ['PATH'] (for {why})")


def started() -> bool:
    return "config" in _state


def current_config() -> _config.EmulatorConfig:
    cfg = _state.get("config")
    if cfg is None:
        raise RuntimeError("the Gaudi emulator is not started (HPU_PLUGIN_EMULATE)")
    assert isinstance(cfg, _config.EmulatorConfig)
    return cfg


def acquired_module() -> int:
    """The module this process acquired. Fixed the first time it matters (a collective, or
    :func:`fix_acquisition_if_device_used`), from the environment as it is then: like the
    real stack, which acquires its device on first use, so ``HLS_MODULE_ID`` set before
    that (by ``torch.hpu.set_device`` or the hccl import) chooses the module, and set after
    it changes nothing."""
    module = _state.get("module")
    if module is None:
        module = _config.acquired_module(os.environ, list(current_config().visible_modules))
        _state["module"] = module
    assert isinstance(module, int)
    return module


def fix_acquisition_if_device_used() -> None:
    """Call before changing what selects the module: once an HPU tensor has existed, the
    device is acquired and a later selection must not move it."""
    if "module" in _state or not started():
        return
    stats = extension().memory_stats(0)
    if stats["NumAllocs"] or stats["MaxInUse"] or stats["InUse"]:
        acquired_module()


def extension() -> ModuleType:
    ext = _state.get("ext")
    assert isinstance(ext, ModuleType)
    return ext


def start() -> None:
    if started():
        return
    cfg = _config.read()
    if real_gaudi_installed():
        raise EmulationError(
            "HPU_PLUGIN_EMULATE is set but the real Gaudi software (habana_frameworks) is "
            "installed; fix: unset HPU_PLUGIN_EMULATE to use the real stack, or emulate in a "
            "virtual environment without habana-torch-plugin"
        )
    from hpu_plugin.emulation import build

    ext = build.load()
    try:
        ext.configure(
            cfg.device_count, cfg.memory, cfg.int64_supported, cfg.fp16_supported,
            cfg.device_name,
        )
    except RuntimeError as exc:
        raise EmulationError(f"the emulator runtime refused its configuration: {exc}") from exc
    ext.route_to_cpu_kernels()
    _state["ext"] = ext
    _state["config"] = cfg
    atexit.register(_let_autograd_threads_finish)

    import torch

    from hpu_plugin.emulation import hpu

    if getattr(torch, "hpu", None) is not hpu:
        torch._register_device_module("hpu", hpu)
    hpu._wrap_torch_manual_seed(patches)
    from hpu_plugin.emulation import lazy

    lazy.start()
    if str(STANDINS) not in sys.path:
        sys.path.append(str(STANDINS))
    _install_hlsmi_shim()
    from hpu_plugin.emulation import dynamo

    dynamo.register_lazily()
    from hpu_plugin.emulation import counters

    counters.count_kernels()  # before the kernels are registered by habana_ops
    _load_habana_ops()
    from hpu_plugin.emulation import gaudi_faults

    gaudi_faults.register()


def _load_habana_ops() -> None:
    """Habana-specific ops (``torch.ops.hpu.*``) live in an optional sibling module."""
    try:
        import hpu_plugin.emulation.habana_ops  # noqa: F401
    except ModuleNotFoundError as exc:
        if exc.name != "hpu_plugin.emulation.habana_ops":
            raise


def _let_autograd_threads_finish() -> None:
    """Give autograd's device threads the GIL before the interpreter finalizes.

    A backward on a non-CPU device ends on an engine thread that still holds the graph
    task; torch stashes a Python object in it (``contextvars`` context), and if that thread
    drops it after finalization has begun, taking the GIL kills the thread mid-unwind and
    the process aborts ("terminate called without an active exception"). A short sleep
    with the GIL released lets the thread finish first.
    """
    time.sleep(0.05)


def _install_hlsmi_shim() -> None:
    """An ``hl-smi`` on PATH for this process and its children (see ``fake_hlsmi.install_shim``)."""
    from hpu_plugin.emulation.fake_hlsmi import install_shim

    install_shim()
