"""sentence-transformers: its Gaudi branch without optimum-habana, and a pool of Gaudi workers.

Read in sentence-transformers 6.2.0 (``sentence_transformers/base/model.py``):

- ``BaseModel.__init__`` on ``device == "hpu"`` imports
  ``optimum.habana.transformers.modeling_utils`` whenever a package named ``optimum`` is
  installed (``importlib.util.find_spec("optimum")``). ``optimum`` without optimum-habana is
  exactly what users moving off optimum-habana have, and the import fails with
  ``ModuleNotFoundError: No module named 'optimum.habana'``. Here that module's
  ``importlib`` answers "no optimum" for that one question when ``optimum.habana`` is absent,
  so the branch takes the plain path (the one it takes without ``optimum``); with
  optimum-habana installed the branch is unchanged. The tested releases use the module's
  ``importlib`` name for that question only, so the patch puts a namespace holding only
  ``util.find_spec`` there (any other use would fail loudly, not be answered wrongly).
- ``start_multi_process_pool()`` with no ``target_devices`` knows CUDA and NPU, and starts four
  CPU workers otherwise, while the model is on hpu. Gaudi takes one device per process, and
  a device a process holds (the parent's, once the model was on hpu) no other can open. Here
  the pool gets one worker per Gaudi module this process does not hold, and each worker
  selects its module (``HLS_MODULE_ID``, as ``torch.hpu.set_device`` and the hccl import do)
  before its first HPU op. Explicit ``hpu`` target devices are checked against the same rule
  before any worker starts; CPU, CUDA and NPU lists are left as they are.

Version-guarded: only the releases in
:data:`~hpu_plugin.hosts.support.SENTENCE_TRANSFORMERS_TESTED`; on any other, both stay out
with one line saying why.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import os
import types
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from typing import Any

from hpu_plugin import importhook
from hpu_plugin.gaudi import visibility
from hpu_plugin.gaudi.config_error import GaudiConfigError
from hpu_plugin.gaudi.software import DEVICE_TYPE
from hpu_plugin.hosts.replacing import host_version, original_of, stay_out
from hpu_plugin.hosts.support import SENTENCE_TRANSFORMERS_TESTED, release_key
from hpu_plugin.patching import Patches, is_ours, ours, record_out
from hpu_plugin.registry import Registry
from hpu_plugin.reporting import say_once

log = logging.getLogger("hpu_plugin")

HOST = "sentence-transformers"
MODULE = "sentence_transformers.base.model"


def known_release(version: str) -> bool:
    key = release_key(version)
    return key is not None and any(
        key == release_key(tested) for tested in SENTENCE_TRANSFORMERS_TESTED
    )


# -- the optimum branch --------------------------------------------------------------------


def optimum_habana_installed() -> bool:
    try:
        return importlib.util.find_spec("optimum.habana") is not None
    except (ImportError, ValueError):  # a broken optimum: its Gaudi part is not usable either
        return False


def find_spec_without_lone_optimum(name: str, package: str | None = None) -> ModuleSpec | None:
    """``importlib.util.find_spec``, but "not found" for ``optimum`` without optimum-habana."""
    if name == "optimum" and not optimum_habana_installed():
        say_once(
            "st-optimum", logging.INFO,
            "hpu_plugin: optimum is installed without optimum-habana; sentence-transformers "
            "loads the model on hpu without optimum-habana's Gaudi adaptation.",
        )
        return None
    return importlib.util.find_spec(name, package)


def importlib_for_base_model() -> types.SimpleNamespace:
    """What ``base/model.py`` gets as ``importlib``: in the tested releases its one use of the
    name is ``importlib.util.find_spec("optimum")``, so this holds only ``util.find_spec``."""
    util = types.SimpleNamespace(find_spec=ours(find_spec_without_lone_optimum))
    return ours(types.SimpleNamespace(util=util))


def install_optimum_branch(patches: Patches, module: types.ModuleType) -> None:
    current = vars(module).get("importlib")
    if current is not importlib:
        if current is None or not is_ours(current):
            stay_out(HOST, "optimum branch", "module-level importlib in base/model.py")
        return
    patches.set(module, "importlib", importlib_for_base_model())


# -- the pool ------------------------------------------------------------------------------


class WorkerDevice(str):
    """``hpu:<index>`` for a worker, with the module id it selects before its first HPU op.

    A ``str`` so sentence-transformers logs and passes it as any device name; it reaches
    the spawned worker by pickling, with ``module``.
    """

    module: int

    def __new__(cls, index: int, module: int) -> WorkerDevice:
        device = super().__new__(cls, f"{DEVICE_TYPE}:{index}")
        device.module = module
        return device

    def __reduce__(self) -> tuple[Any, ...]:
        return (WorkerDevice, (int(self.split(":")[1]), self.module))


class PoolError(ValueError):
    """target_devices that break Gaudi's one-device-per-process rule."""


def visible_module_ids(device_count: int) -> tuple[int, ...]:
    """The module id behind each device index this process sees: ``HABANA_VISIBLE_MODULES``
    in order, else ``hl-smi``'s index-to-module table, else module ``i`` for index ``i`` (the
    rule for a whole server with the variable unset)."""
    listed = visibility.visible_modules(os.environ)
    if listed is not None:
        return listed
    from hpu_plugin import machine

    answer = machine.query()  # index and module_id
    rows = answer.rows or []
    by_index = {
        int(row["index"]): int(row["module_id"]) for row in rows
        if row.get("index", "").isdigit() and row.get("module_id", "").isdigit()
    }
    if len(by_index) == device_count:
        return tuple(by_index[index] for index in sorted(by_index))
    return tuple(range(device_count))


def held_module(modules: Sequence[int], holds_device: bool) -> int | None:
    """The module this process holds: its ``HLS_MODULE_ID``, else the first visible one
    (a device acquired by type is the first free module)."""
    if not holds_device:
        return None
    own = visibility.parse_module_id(os.environ.get(visibility.MODULE_ID))
    return own if own is not None else modules[0]


def _index(device: str) -> int | None:
    _, colon, index = device.partition(":")
    if not colon:
        return None
    if not index.isdigit():  # "hpu:" too, which torch.device refuses
        raise PoolError(f"target_devices: {device!r} is not a device name; use hpu:<index>")
    return int(index)


def hpu_workers(
    target_devices: Sequence[Any], modules: Sequence[int], held: int | None
) -> list[Any]:
    """``target_devices`` with each ``hpu`` entry as a :class:`WorkerDevice`; a
    :class:`PoolError` naming the entry when two workers would share a device, or a worker
    would take the device this process holds."""
    fix = (
        f"give each worker its own Gaudi (hpu:0 to hpu:{len(modules) - 1}, not the one this "
        "process holds), or leave target_devices unset for one worker per free Gaudi"
    )
    result: list[Any] = []
    taken: set[int] = set()
    for device in target_devices:
        name = str(device)
        if name.split(":")[0] != DEVICE_TYPE:
            result.append(device)
            continue
        index = _index(name) or 0
        if index >= len(modules):
            raise PoolError(
                f"target_devices={list(map(str, target_devices))!r}: {name} is not one of the "
                f"{len(modules)} Gaudi device(s) this process sees; fix: {fix}"
            )
        module = modules[index]
        if module in taken or module == held:
            whose = "this process (the model was on it)" if module == held else "another worker"
            raise PoolError(
                f"target_devices={list(map(str, target_devices))!r}: {name} (Gaudi module "
                f"{module}) is held by {whose}, and Gaudi opens a device in one process only; "
                f"fix: {fix}"
            )
        taken.add(module)
        result.append(WorkerDevice(index, module))
    return result


def default_hpu_workers(modules: Sequence[int], held: int | None) -> list[Any]:
    free = [(index, module) for index, module in enumerate(modules) if module != held]
    if not free:
        raise PoolError(
            f"start_multi_process_pool(): the only Gaudi this process sees (module {held}) is "
            "held by this process, where the model is, and Gaudi opens a device in one "
            "process only; fix: encode without a pool (the model runs on that Gaudi), make "
            "more Gaudi modules visible (HABANA_VISIBLE_MODULES), or pass "
            "target_devices=['cpu'] * 4 for CPU workers"
        )
    return [WorkerDevice(index, module) for index, module in free]


def make_start_pool(
    registry: Registry, original: Callable[..., Any], npu_available: Callable[[], bool]
) -> Callable[..., Any]:
    @functools.wraps(original)
    def start_multi_process_pool(self: Any, target_devices: Any = None) -> Any:
        if not registry.device_available():
            return original(self, target_devices)
        import torch

        if target_devices is None and (torch.cuda.is_available() or npu_available()):
            return original(self, target_devices)
        device = getattr(self, "device", None)
        holds = getattr(device, "type", None) == DEVICE_TYPE or torch.hpu.is_initialized()
        try:
            modules = visible_module_ids(torch.hpu.device_count())
        except GaudiConfigError as exc:
            raise PoolError(str(exc)) from exc
        held = held_module(modules, holds)
        if target_devices is None:
            target_devices = default_hpu_workers(modules, held)
            log.info("hpu_plugin: one pool worker per free Gaudi: %s",
                     ", ".join(f"{d} (module {d.module})" for d in target_devices))
        else:
            target_devices = hpu_workers(target_devices, modules, held)
        return original(self, target_devices)

    return ours(start_multi_process_pool)


def make_worker(original: Callable[..., Any]) -> classmethod[Any, Any, Any]:
    """The worker selects its Gaudi module before its first HPU op, then runs on ``hpu``
    (the only device a Gaudi process drives)."""

    @functools.wraps(original)
    def _multi_process_worker(cls: type, target_device: Any, *args: Any) -> Any:
        if isinstance(target_device, WorkerDevice):
            os.environ[visibility.MODULE_ID] = str(target_device.module)
            target_device = DEVICE_TYPE
        return original(cls, target_device, *args)

    return classmethod(ours(_multi_process_worker))


def install_pool(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    cls = getattr(module, "BaseModel", None)
    start = original_of(cls, "start_multi_process_pool", HOST, "pool",
                        "BaseModel.start_multi_process_pool", own=True)
    worker = original_of(cls, "_multi_process_worker", HOST, "pool",
                         "BaseModel._multi_process_worker", own=True)
    npu = getattr(module, "is_torch_npu_available", None)
    if start is None or worker is None or cls is None:
        return
    if not isinstance(vars(cls)["_multi_process_worker"], classmethod) or npu is None:
        stay_out(HOST, "pool", "classmethod BaseModel._multi_process_worker and "
                 "is_torch_npu_available in base/model.py")
        return
    patches.set(cls, "start_multi_process_pool", make_start_pool(registry, start, npu))
    patches.set(cls, "_multi_process_worker", make_worker(worker.__func__))


# -- installation --------------------------------------------------------------------------


def install_base_model(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    version = host_version(HOST)
    if not known_release(version):
        tested = ", ".join(SENTENCE_TRANSFORMERS_TESTED)
        record_out(HOST, "optimum branch and pool",
                   f"sentence-transformers {version} is not a tested release (tested: {tested})")
        say_once(
            f"stay-out:{HOST}", logging.WARNING,
            "hpu_plugin: sentence-transformers %s is not a release its adapter was tested on "
            "(tested: %s); it stays out: with optimum installed without optimum-habana, "
            "loading on hpu may fail, and start_multi_process_pool() starts CPU workers; "
            "install sentence-transformers==%s.",
            version, tested, SENTENCE_TRANSFORMERS_TESTED[-1],
        )
        return
    install_optimum_branch(patches, module)
    install_pool(registry, patches, module)


def install(registry: Registry, patches: Patches, available: bool) -> None:
    """Register the post-import hook when a Gaudi is ready (without one, the host's HPU
    branches are never taken)."""
    if not available:
        return
    importhook.when_imported(MODULE, lambda module: install_base_model(registry, patches, module))
