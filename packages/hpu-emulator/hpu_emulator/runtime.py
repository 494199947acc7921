"""The running emulator's shared state: its configuration, the loaded C++ runtime, the
module this process acquired, and what it changed outside itself (:data:`patches`).

Every part of the emulator reads it here; it imports none of them, so they import it at
their top. Bringing the emulator up is ``startup.start``, which fills it in.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

from hpu_emulator import config as _config
from hpu_plugin.patching import Patches, this_process

#: The stand-ins for ``habana_frameworks`` and its companions (package data, each marked
#: with ``hpu_plugin.gaudi.software.STANDIN_MARKER``); on ``sys.path`` only while emulating.
STANDINS = Path(__file__).resolve().parent / "standins"

#: Filled by ``startup.start``: "config", "ext" (the C++ runtime), later "module".
_state: dict[str, object] = {}
#: What the emulator changed outside its own modules (``torch.manual_seed``, ``PATH``):
#: its part of the process's activation, undone with the rest.
patches = this_process.emulator
#: The stand-ins on ``sys.path``, kept apart from :data:`patches`: an emulator that started
#: keeps them when the plugin fails later.
search_path = this_process.search_path


def add_standins() -> None:
    """Make the stand-ins importable in this process and in its children.

    Appended to ``sys.path``, never prepended, so they cannot shadow anything installed
    (``startup.start`` refuses to run at all beside the real Gaudi software). Children get
    them through ``PYTHONPATH``: a child that never imports torch (``pip list``, which
    optimum-habana reads) sees the stand-ins' ``habana-torch-plugin`` distribution as it
    would see the real one; a child that imports torch starts its own emulator.
    """
    entry = str(STANDINS)
    add_to_search_path(entry)
    inherited = os.environ.get("PYTHONPATH", "")
    if entry not in inherited.split(os.pathsep):
        search_path.set_item(
            os.environ, "PYTHONPATH", inherited + os.pathsep + entry if inherited else entry,
            "os.environ['PYTHONPATH'] (the stand-ins, for child processes)")


def add_to_search_path(entry: str, patches: Patches = search_path) -> None:
    """Append ``entry`` to ``sys.path`` unless it is there, recorded in ``patches``
    (:data:`search_path`). Undone, it is removed and the modules imported from it are
    forgotten, so nothing of it stays in use."""
    if entry in sys.path:
        return
    sys.path.append(entry)

    def undo() -> None:
        if entry in sys.path:
            sys.path.remove(entry)
        importlib.invalidate_caches()
        for name, module in list(sys.modules.items()):
            if (getattr(module, "__file__", None) or "").startswith(entry):
                del sys.modules[name]

    patches.on_undo(undo, f"sys.path += {entry!r}")


def append_to_path(directory: str, why: str) -> None:
    """Put ``directory`` last on ``PATH`` for this process and its children (they run
    ``why``, e.g. ``hl-smi``, by name), through :data:`patches`. Last, so that it only
    adds the program that was missing and can never stand in for one of the user's."""
    path = os.environ.get("PATH", "")
    patches.set_item(os.environ, "PATH", path + os.pathsep + directory if path else directory,
                     f"os.environ['PATH'] (for {why})")


def set_started(cfg: _config.EmulatorConfig, ext: ModuleType) -> None:
    """The emulator is up: ``startup.start`` calls this once the C++ runtime ``ext`` took
    the configuration ``cfg``."""
    _state["ext"] = ext
    _state["config"] = cfg


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
        from hpu_emulator import metrics

        metrics.dispatcher.publish(metrics.DEVICE_ACQUIRED, {})
    assert isinstance(module, int)
    return module


def device_acquired() -> bool:
    """Whether this process has acquired its module yet."""
    return "module" in _state


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
