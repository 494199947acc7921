"""``pynvml`` under the GPU Migration Toolkit on the emulator: NVML queries answer with the
emulated Gaudi.

On Gaudi the toolkit imports ``pynvml`` and replaces the functions it maps, each by its
``pyhlml`` twin (``nvmlInit`` by ``hlmlInit``, ``nvmlDeviceGetCount`` by
``hlmlDeviceGetCount``, ...; all ``hpu_match``): code that watches its GPUs with NVML then
sees the Gaudi devices. A function it does not map (``nvmlSystemGetDriverVersion``) stays
NVIDIA's and fails there (NVML is never initialised). Here the same names are replaced
(:data:`MAPPED`), whether NVIDIA's ``pynvml`` is installed (its module is patched, as the
toolkit does) or not (a module of these functions is put in ``sys.modules['pynvml']``, so
``import pynvml`` finds it); the ones the emulator can answer (:data:`ANSWERED`: count,
handles, name, memory, UUID, minor number) answer from the emulated server, and every other
``nvml*`` call raises :class:`NotOnTheEmulator`, an ``NVMLError`` (code
``NVML_ERROR_NOT_SUPPORTED``) whose message names the call and says whether the toolkit maps
it. Loaded only with the toolkit (``gpu_migration.activate``).
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Callable
from typing import Any

from hpu_emulator import config, fake_hlsmi, runtime
from hpu_plugin.patching import Patches

MODULE = "pynvml"
#: What the toolkit maps to pyhlml (its ``pynvml`` table, all ``hpu_match``).
MAPPED = (
    "nvmlInit", "nvmlShutdown", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetCpuAffinity", "nvmlDeviceClearCpuAffinity", "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetCurrentClocksThrottleReasons", "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetMemoryErrorCounter", "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMinorNumber", "nvmlDeviceGetName", "nvmlDeviceGetPerformanceState",
    "nvmlDeviceGetPersistenceMode", "nvmlDeviceGetPowerManagementDefaultLimit",
    "nvmlDeviceGetPowerUsage", "nvmlDeviceGetSerial", "nvmlDeviceGetTemperature",
    "nvmlDeviceGetTemperatureThreshold", "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetUUID", "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetViolationStatus",
    "nvmlDeviceRegisterEvents", "nvmlDeviceSetCpuAffinity", "nvmlEventSetCreate",
    "nvmlEventSetFree", "nvmlEventSetWait",
)
#: NVML's return codes the answers use (``pynvml.NVML_ERROR_*``).
UNINITIALIZED, INVALID_ARGUMENT, NOT_SUPPORTED, NOT_FOUND = 1, 2, 3, 6

#: The toolkit's list of changes (``gpu_migration.patches``), given to :func:`install`.
_patches: list[Patches] = []
_state = {"init": 0}


class NVMLError(Exception):
    """The stand-in module's ``pynvml.NVMLError`` (``value``: NVML's return code)."""

    def __init__(self, value: int, message: str = "") -> None:
        super().__init__(message or f"NVML error {value}")
        self.value = value


def _error_class(base: type[Exception]) -> type[Exception]:
    """An error ``except pynvml.NVMLError`` catches, whichever ``NVMLError`` the module has
    (NVIDIA's maps its code to a subclass in ``__new__`` and looks its text up in the
    driver: both are bypassed, the message is ours)."""

    def __new__(cls: type, value: int, message: str) -> Exception:
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self: Exception, value: int, message: str) -> None:
        Exception.__init__(self, message)

    return type("NotOnTheEmulator", (base, NotImplementedError), {
        "__new__": __new__, "__init__": __init__, "__str__": lambda self: self.args[0],
        "__module__": MODULE,
        "__doc__": "A pynvml call the emulated GPU Migration Toolkit cannot answer."})


NotOnTheEmulator: type[Exception] = _error_class(NVMLError)
#: The class raised: :data:`NotOnTheEmulator`, or its twin under NVIDIA's ``NVMLError``.
_raised: dict[str, type[Exception]] = {"class": NotOnTheEmulator}


class Handle:
    """What ``nvmlDeviceGetHandleByIndex`` returns: the device's index and module id."""

    def __init__(self, index: int, module: int) -> None:
        self.index, self.module = index, module

    def __repr__(self) -> str:
        return f"<emulated Gaudi handle index={self.index} module_id={self.module}>"


class Memory:
    """``nvmlDeviceGetMemoryInfo``'s answer (pyhlml's ``c_hlml_memory``): bytes."""

    def __init__(self, total: int, used: int) -> None:
        self.total, self.used, self.free = total, used, max(0, total - used)

    def __repr__(self) -> str:
        return f"Memory(total={self.total}, free={self.free}, used={self.used})"


def _fail(value: int, message: str) -> Exception:
    return _raised["class"](value, message)  # type: ignore[call-arg]


def _server() -> config.Server:
    if not _state["init"]:
        raise _fail(UNINITIALIZED, "Uninitialized: call pynvml.nvmlInit() first")
    return config.server()


def _handle(handle: Any) -> Handle:
    if not isinstance(handle, Handle):
        raise _fail(INVALID_ARGUMENT, f"Invalid Argument: {handle!r} is not a handle of "
                    "pynvml.nvmlDeviceGetHandleByIndex on the emulator")
    return handle


def nvmlInit() -> None:
    _state["init"] += 1


def nvmlShutdown() -> None:
    """As NVML's: init calls are counted and only the last shutdown ends the session, so a
    library that shuts its own session down leaves the program's working."""
    if not _state["init"]:
        raise _fail(UNINITIALIZED, "Uninitialized: pynvml.nvmlShutdown() before nvmlInit()")
    _state["init"] -= 1


def nvmlDeviceGetCount() -> int:
    """The devices this container sees (``HABANA_VISIBLE_DEVICES``), as ``hl-smi``."""
    return len(_server().container_indices)


def nvmlDeviceGetHandleByIndex(index: int) -> Handle:
    srv = _server()
    count = len(srv.container_indices)
    if not isinstance(index, int) or not 0 <= index < count:
        raise _fail(INVALID_ARGUMENT, f"Invalid Argument: device index {index!r}; this "
                    f"server has {count} (0..{count - 1})")
    return Handle(index, srv.modules[srv.container_indices[index]])


def _fields(handle: Any) -> dict[str, str]:
    srv, found = _server(), _handle(handle)
    return fake_hlsmi.device_fields(srv, srv.container_indices[found.index])


def nvmlDeviceGetHandleByUUID(uuid: str | bytes) -> Handle:
    wanted = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    for index in range(nvmlDeviceGetCount()):
        handle = nvmlDeviceGetHandleByIndex(index)
        if _fields(handle)["uuid"] == wanted:
            return handle
    raise _fail(NOT_FOUND, f"Not Found: no emulated Gaudi has UUID {wanted!r}")


def nvmlDeviceGetName(handle: Any) -> bytes:
    """bytes, as pyhlml answers (``GAUDI2``)."""
    return _fields(handle)["name"].encode()


def nvmlDeviceGetUUID(handle: Any) -> bytes:
    return _fields(handle)["uuid"].encode()


def nvmlDeviceGetSerial(handle: Any) -> bytes:
    return _fields(handle)["serial"].encode()


def nvmlDeviceGetMinorNumber(handle: Any) -> int:
    return _handle(handle).module


def nvmlDeviceGetMemoryInfo(handle: Any) -> Memory:
    """The device this process uses answers from the emulator's allocator (its limit and
    what is in use); the others, untouched by this process, from the server's size."""
    srv, found = _server(), _handle(handle)
    if runtime.started():
        runtime.fix_acquisition_if_device_used()
        stats = runtime.extension().memory_stats(0)
        used = stats["NumAllocs"] or stats["InUse"] or stats["MaxInUse"]
        if used and runtime.acquired_module() == found.module:
            return Memory(int(stats["Limit"]), int(stats["InUse"]))
    return Memory(srv.memory, 0)


#: The calls answered here; every other ``nvml*`` name raises :class:`NotOnTheEmulator`.
ANSWERED: dict[str, Callable[..., Any]] = {
    f.__name__: f for f in (
        nvmlInit, nvmlShutdown, nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex,
        nvmlDeviceGetHandleByUUID, nvmlDeviceGetName, nvmlDeviceGetUUID, nvmlDeviceGetSerial,
        nvmlDeviceGetMinorNumber, nvmlDeviceGetMemoryInfo,
    )
}


def _refusal(name: str) -> Callable[..., Any]:
    if name in MAPPED:
        why = (f"pynvml.{name} is mapped to pyhlml by the GPU Migration Toolkit on Gaudi, "
               "but the emulator has no such device reading")
    else:
        why = (f"pynvml.{name} is not mapped by the GPU Migration Toolkit (on Gaudi it "
               "stays NVIDIA's and fails: there is no NVIDIA driver)")
    message = f"Not Supported: {why}; mapped and answered here: {', '.join(ANSWERED)}"

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise _fail(NOT_SUPPORTED, message)

    refuse.__name__ = refuse.__qualname__ = name
    return refuse


def _stand_in() -> types.ModuleType:
    """``pynvml`` when NVIDIA's is not installed: the answered calls, ``NVMLError``, and a
    refusal for any other ``nvml*`` name (so ``from pynvml import X`` works as on Gaudi,
    where X exists, and the call says what is missing)."""
    module = types.ModuleType(MODULE, "pynvml as the emulated GPU Migration Toolkit "
                                      "answers it (NVIDIA's pynvml is not installed)")
    module.__dict__.update(ANSWERED, NVMLError=NVMLError, NotOnTheEmulator=NotOnTheEmulator)
    module.__all__ = [*ANSWERED, "NVMLError"]  # type: ignore[attr-defined]

    def __getattr__(name: str) -> Any:
        if name.startswith("nvml"):
            return _refusal(name)
        raise AttributeError(f"module 'pynvml' (the emulated GPU Migration Toolkit's, "
                             f"NVIDIA's pynvml is not installed) has no attribute {name!r}")

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    return module


def _patch(module: types.ModuleType, patches: Patches) -> None:
    """NVIDIA's module, installed: replaced in place, as the toolkit does."""
    _raised["class"] = _error_class(getattr(module, "NVMLError", NVMLError))
    patches.set(module, "NotOnTheEmulator", _raised["class"])
    names = {n for n, v in vars(module).items() if n.startswith("nvml") and callable(v)}
    for name in sorted(names | set(MAPPED)):
        patches.set(module, name, ANSWERED.get(name) or _refusal(name))


def install(patches: Patches) -> None:
    """``import pynvml`` from here on answers with the emulated devices; the changes are
    recorded in ``patches`` (the toolkit's)."""
    if _patches:
        return
    _patches.append(patches)
    if MODULE in sys.modules or importlib.util.find_spec(MODULE) is not None:
        import pynvml  # NVIDIA's (nvidia-ml-py): patched as the toolkit patches it

        _patch(pynvml, patches)
    else:
        sys.modules[MODULE] = _stand_in()
        patches.on_undo(lambda: sys.modules.pop(MODULE, None), "sys.modules['pynvml']")
