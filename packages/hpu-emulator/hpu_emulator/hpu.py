"""``torch.hpu`` of the emulated Gaudi: the public API of ``habana_frameworks.torch.hpu``.

Semantics follow the real module: ``is_available`` never raises, RNG state
exists for device 0 only, ``manual_seed_all`` is ``manual_seed``, memory statistics are the
allocator's ``InUse``/``MaxInUse``/``Limit``, there is no ``empty_cache``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from hpu_emulator import bridge_flags, runtime
from hpu_plugin import settings
from hpu_plugin.gaudi import visibility
from hpu_plugin.gaudi.generations import Generation, generation_from_name
from hpu_plugin.gaudi.visibility import MAX_DEVICES
from hpu_plugin.patching import Patches, is_ours, ours

_initialized = False
_autocast_dtype = torch.bfloat16


def _ext() -> Any:
    return runtime.extension()


def _index(device: Any = None) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "hpu":
            raise ValueError(f"expected an hpu device, got {device}")
        return current_device() if device.index is None else device.index
    raise TypeError(f"not a device: {device!r}")


# ------------------------------------------------------------------ core


def init() -> None:
    """As the real ``init``, acquires the device: from here on the module is fixed."""
    global _initialized
    if _initialized:
        return
    runtime.acquired_module()
    _initialized = True
    with contextlib.suppress(Exception):
        import torch.utils.checkpoint as checkpoint

        checkpoint.DefaultDeviceType.set_device_type("hpu")


def is_initialized() -> bool:
    return _initialized


def _lazy_init() -> None:
    if not _initialized:
        init()


def is_available() -> bool:
    try:
        return runtime.started() and _ext().device_count() > 0
    except Exception:
        return False


@functools.lru_cache(maxsize=1)
def device_count() -> int:
    return int(_ext().device_count()) if runtime.started() else 0


def current_device() -> int:
    init()
    return int(_ext().current_device())


def _check_index(index: int) -> int:
    """The real module's range check of an index argument (its text)."""
    if index < 0 or index >= device_count():
        raise AssertionError("Invalid device id")
    return index


def set_device(device: Any) -> None:
    """As the real one: map the index to a module id and set
    ``HLS_MODULE_ID``, which chooses the module the process acquires if it has not yet; the
    current device stays hpu:0, the only device a process drives."""
    index = _index(device)
    raw = os.environ.get(visibility.MODULES)
    available = visibility.parse_visible_modules(raw or None) or tuple(range(MAX_DEVICES))
    if index not in available and index > len(available):
        raise AssertionError(
            f"Trying to open device with idx={index} when only {list(available)} are "
            "avaliable)"  # sic, the real text
        )
    current = visibility.parse_module_id(os.environ.get(visibility.MODULE_ID) or None)
    if current is not None:
        for position in range(min(device_count(), len(available))):
            if available[position] == current:
                index = position
                break
        requested = available[index] if index < len(available) else index
        assert requested == current, (
            f"Requested module_id={requested} is different from current_module_id={current} "
            "which was previously set."
        )
    elif raw is None and device_count() < MAX_DEVICES:
        # Without either variable the module is acquired by type: only index 0 means anything.
        assert index == 0, (
            f"As {visibility.MODULES} is not provided, the only supported device idx is 0."
        )
    else:
        runtime.fix_acquisition_if_device_used()
        os.environ[visibility.MODULE_ID] = str(available[index])
    set_device.current_device_idx = index  # type: ignore[attr-defined]


set_device.current_device_idx = -1  # type: ignore[attr-defined]


def get_device_name(device: Any = None) -> str:
    if not is_available():
        warnings.warn("Device not available", stacklevel=2)
        return ""
    init()
    _check_index(_index(device))
    return runtime.current_config().device_name


def get_device_capability(device: Any = None) -> tuple[int, int]:
    return (_generation().number, 0)


def _generation() -> Generation:
    found = generation_from_name(runtime.current_config().device_name)
    assert found is not None
    return found


@dataclass(frozen=True)
class _DeviceProperties:
    name: str
    total_memory: int
    module_id: int

    def __repr__(self) -> str:
        return (
            f"_HpuDeviceProperties(name='{self.name}', total_memory="
            f"{self.total_memory // (1024 * 1024)}MB, module_id={self.module_id})"
        )


def get_device_properties(device: Any = None) -> _DeviceProperties:
    """Of the acquired device, whatever the (valid) index: it is the only one in play."""
    init()
    _check_index(_index(device))
    cfg = runtime.current_config()
    return _DeviceProperties(cfg.device_name, cfg.memory, runtime.acquired_module())


def get_arch_list() -> list[str]:
    """The real one lists the device name (``["GAUDI2"]``)."""
    return [get_device_name()]


def can_device_access_peer(device: Any, peer_device: Any) -> bool:
    """The bridge's answer: two different valid indices are peers (the cards of a server
    are linked), the same or an invalid one is an error."""
    init()
    count = device_count()
    for index in (_index(device), _index(peer_device)):
        if not 0 <= index < count:
            raise AssertionError(f"Invalid device id : {index}")
    if _index(device) == _index(peer_device):
        raise AssertionError("Both the ids are same.")
    return True


def synchronize(device: Any = None) -> None:
    """Work is synchronous on the emulator; counted, as the host waits here on Gaudi."""
    from hpu_emulator import counters

    counters.count("synchronize_calls")


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return is_available()


def _module_id_from_environ() -> int:
    raw = os.environ.get(visibility.MODULE_ID, "")
    try:  # acquisition has refused a bad value already; -1 is "none", as the bridge says
        return settings.rank(visibility.MODULE_ID, raw) if raw.strip() else -1
    except settings.SettingError:
        return -1


class device:
    """As the real context manager: index 0 or the acquired module's id, nothing else (a
    process drives one device); entering selects that module with :func:`set_device`."""

    def __init__(self, device: Any) -> None:
        index = -1 if device is None else _index(device)
        module = _module_id_from_environ()
        if index not in (-1, 0) and index != module:
            raise AssertionError(
                f"Requested device_id={index} is different from env_device_id={module}"
            )
        self.idx = module
        self.prev_idx = -1

    def __enter__(self) -> None:
        self.prev_idx = set_device.current_device_idx  # type: ignore[attr-defined]
        if self.idx != -1 and self.idx != self.prev_idx:
            set_device(self.idx)

    def __exit__(self, *exc: object) -> None:
        if self.prev_idx not in (-1, self.idx):
            set_device(self.idx)


class device_of(device):
    def __init__(self, obj: Any) -> None:
        super().__init__(obj.get_device() if obj.is_hpu else None)


# ------------------------------------------------------------------ streams and events


#: ``c10::DeviceType::HPU``, the device type a ``torch.Stream`` of ``hpu`` carries.
_HPU_DEVICE_TYPE = 15


class Stream(torch.Stream):
    """As the bridge's ``torch.hpu.Stream``: ``Stream()`` is a new stream with an id of its
    own (the default stream is id 0), and ``stream_id=`` / ``is_default_stream=`` name an
    existing one, as its binding takes them. Its event methods take its own
    ``torch.hpu.Event`` (and torch's), through the event's ``record`` and ``wait``, as the
    bridge's do; torch's C++ ones take only a ``torch.Event`` (FSDP 2 waits on a
    ``torch.hpu.Event`` on a ``torch.hpu.Stream``). Work on every stream runs at once."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> Stream:
        index = _index(kwargs.get("device_index", device))
        if index < 0:  # the bridge's streams take -1 for the current device
            index = current_device()
        if kwargs.get("is_default_stream"):
            kwargs["stream_id"] = 0
        if "stream_id" in kwargs:
            return super().__new__(cls, stream_id=int(kwargs["stream_id"]), device_index=index,
                                   device_type=int(kwargs.get("device_type", _HPU_DEVICE_TYPE)))
        return super().__new__(cls, device=torch.device("hpu", index), priority=priority)

    def wait_event(self, event: Any) -> None:
        event.wait(self)

    def wait_stream(self, stream: Any) -> None:
        self.wait_event(stream.record_event())

    def record_event(self, event: Any = None) -> Any:
        if event is None:
            event = Event()
        event.record(self)
        return event

    def id(self) -> int:
        return self.stream_id

    def __repr__(self) -> str:
        return f"<torch.hpu.Stream device=hpu:{self.device_index} hpu_stream={self.stream_id:#x}>"


class Event(torch.Event):
    """As the bridge's ``torch.hpu.Event``: a ``torch.Event`` of ``hpu`` (the bridge's derives
    from torch's event base), so that dynamo traces it as an event and torch's streams take
    it. ``record`` and ``wait`` default to the current stream. Work here is done when its call
    returns, so an event is complete when recorded and its time is the host's clock then
    (``elapsed_time`` in milliseconds). ``blocking`` and ``interprocess``
    (``torch.cuda.Event``'s, under the GPU Migration Toolkit) change nothing on one
    synchronous stream."""

    enable_timing: bool
    _recorded_ns: int | None

    def __new__(cls, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False) -> Event:
        event = super().__new__(cls, device=torch.device("hpu", current_device()),
                                enable_timing=enable_timing)
        event.enable_timing = enable_timing
        event._recorded_ns = None
        return event

    def record(self, stream: Any = None) -> None:
        super().record(current_stream() if stream is None else stream)
        self._recorded_ns = time.perf_counter_ns()

    def wait(self, stream: Any = None) -> None:
        super().wait(current_stream() if stream is None else stream)

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds from this event's record to ``end_event``'s (torch's own method takes
        no subclass of its event as the other one)."""
        if not isinstance(end_event, Event):
            raise TypeError(f"elapsed_time takes a torch.hpu.Event, got {type(end_event)!r}")
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("elapsed_time needs both events created with "
                               "enable_timing=True")
        if self._recorded_ns is None or end_event._recorded_ns is None:
            raise RuntimeError("elapsed_time needs both events recorded first: call record()")
        return (end_event._recorded_ns - self._recorded_ns) / 1e6

    def __repr__(self) -> str:
        return f"<torch.hpu.Event device=hpu:{current_device()} event_id={self.event_id:#x}>"


def current_stream(device: Any = None) -> Stream:
    """This thread's current stream (the default one until ``set_stream`` or ``stream``).
    Inside a function dynamo traces, torch's accelerator stream, which dynamo tracks as the
    stream the graph's work is queued on (the bridge lists its own function with dynamo)."""
    if torch.compiler.is_compiling():
        if device is None:
            return torch.accelerator.current_stream()  # type: ignore[return-value]
        return torch.accelerator.current_stream(device)  # type: ignore[return-value]
    return Stream(stream_id=_ext().current_stream(), device_index=_index(device))


def default_stream(device: Any = None) -> Stream:
    if torch.compiler.is_compiling():  # as current_stream
        return Stream(device)
    return Stream(stream_id=0, device_index=_index(device))


def set_stream(stream: Any) -> None:
    """Make ``stream`` this thread's current stream (``None``: no change). As the bridge, a
    change of stream in lazy mode first runs the accumulated graph (a step mark)."""
    if stream is None or torch.compiler.is_compiling():  # host state: see current_stream
        return
    if stream.stream_id != _ext().current_stream():
        from hpu_emulator import lazy

        if lazy.is_lazy():
            lazy.flush()
        _ext().set_current_stream(int(stream.stream_id))


def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
    set_stream(Stream(stream_id=stream_id, device_index=device_index, device_type=device_type))


class StreamContext:
    """``with torch.hpu.stream(s):``: ``s`` is the current stream inside, the one before it
    after; ``None`` changes nothing."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.previous: Stream | None = None

    def __enter__(self) -> None:
        if self.stream is None:
            return
        self.previous = current_stream()
        set_stream(self.stream)

    def __exit__(self, *exc: object) -> None:
        if self.stream is not None and self.previous is not None:
            set_stream(self.previous)


def stream(stream: Any) -> StreamContext:
    return StreamContext(stream)


def get_stream_info(stream: Stream) -> tuple[torch.device, int]:
    """``(device, stream id)``, as the bridge's binding gives them."""
    return torch.device("hpu", _index(stream.device_index)), int(stream.stream_id)


def record_stream(tensor: torch.Tensor, stream: Any) -> None:
    """Memory is never reused under work still queued: there is none."""


# ------------------------------------------------------------------ memory


def memory_stats(device: Any = None) -> dict[str, int]:
    """Any valid index answers for the acquired device, as on hardware (the real binding
    ignores the index), so ``mem_get_info(i)`` for every ``i < device_count()`` works."""
    init()
    _check_index(_index(device))
    return dict(_ext().memory_stats(0))


def memory_allocated(device: Any = None) -> int:
    return int(memory_stats(device)["InUse"])


def max_memory_allocated(device: Any = None) -> int:
    return int(memory_stats(device)["MaxInUse"])


def memory_reserved(device: Any = None) -> int:
    """The stack reserves all device memory up front."""
    return int(memory_stats(device)["Limit"])


max_memory_reserved = memory_reserved
memory_cached = memory_reserved
max_memory_cached = memory_reserved


def reset_peak_memory_stats(device: Any = None) -> None:
    _check_index(_index(device))
    _ext().reset_peak_memory_stats(0)


def reset_max_memory_allocated(device: Any = None) -> None:
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device: Any = None) -> None:
    _check_index(_index(device))
    _ext().reset_accumulated_memory_stats(0)


def mem_get_info(device: Any = None) -> tuple[int, int]:
    stats = memory_stats(device)
    return max(0, stats["Limit"] - stats["InUse"]), stats["Limit"]


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    stats = memory_stats(device)
    rows = [f"{key:>16}: {value}" for key, value in stats.items()]
    return f"HPU memory summary, device {_index(device)}\n" + "\n".join(rows)


def memory_usage(device: Any = None) -> int:
    """Bytes in use, as the bridge returns (``InUse`` of the memory statistics)."""
    return memory_stats(device)["InUse"]


def utilization(device: Any = None) -> int:
    """The bridge asks ``pyhlml``, Gaudi's management library, which is not emulated."""
    init()
    _check_index(_index(device))
    raise ModuleNotFoundError("pyhlml module not found, please install pyhlml")


# ------------------------------------------------------------------ random


def _generator(index: int = 0) -> torch.Generator:
    return _ext().default_generator(index)


default_generators: tuple[torch.Generator, ...] = ()


def _check_rng_device(device: Any, function: str) -> int:
    """The bridge keeps one generator, device 0's (``habana_frameworks/torch/hpu/random.py``),
    and refuses any other index with its own RuntimeError."""
    index = _index(device)
    if index != 0:
        raise RuntimeError(f"hpu {function} supports only device 0")
    return index


def get_rng_state(device: Any = "hpu") -> torch.Tensor:
    return _generator(_check_rng_device(device, "get_rng_state")).get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "hpu") -> None:
    _generator(_check_rng_device(device, "set_rng_state")).set_state(new_state.clone())


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(0)]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    if len(new_states) != 1:
        raise RuntimeError("hpu set_rng_state_all supports only states len of 1 (one state, "
                           f"device 0's; got {len(new_states)})")
    set_rng_state(new_states[0], 0)


def manual_seed(seed: int) -> torch.Generator:
    """Seeds the one generator a process has, that of its device hpu:0, and returns it (as
    the bridge's does)."""
    return _generator(0).manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    manual_seed(seed)


def seed() -> int:
    """A fresh random seed for hpu:0's generator; the seed, as the bridge returns it."""
    return int(_generator(0).seed())


def seed_all() -> None:
    seed()


def initial_seed() -> int:
    return int(_generator(0).initial_seed())


def _wrap_torch_manual_seed(patches: Patches) -> None:
    """Like the real stack (``core/torch_overwrites.py``): ``torch.manual_seed`` also reseeds
    the HPU generator, ``torch.seed`` gives it the same fresh seed, and
    ``torch.random.fork_rng`` forks the HPU generator when no device type is named.

    Through ``patches`` (the emulator's), so the change is recorded and undone like the
    host adapters'; a function that is already ours is left alone.
    """
    global default_generators
    default_generators = (_generator(0),)
    random.default_generators = default_generators  # DeepSpeed reads it there
    original = _unpatched(torch, "manual_seed")
    if original is not None:
        @functools.wraps(original)
        def seeded(seed: int) -> torch.Generator:
            result = original(seed)
            manual_seed(seed)
            return result

        patches.set(torch, "manual_seed", ours(seeded))
        patches.set(torch.random, "manual_seed", seeded)
    seed_original = _unpatched(torch, "seed")
    if seed_original is not None:
        @functools.wraps(seed_original)
        def fresh_seed() -> int:
            value = seed_original()
            manual_seed_all(value)
            return value

        patches.set(torch, "seed", ours(fresh_seed))
        patches.set(torch.random, "seed", fresh_seed)
    fork_original = _unpatched(torch.random, "fork_rng")
    if fork_original is not None:
        @functools.wraps(fork_original)
        def fork_rng(devices: Any = None, enabled: bool = True, _caller: str = "fork_rng",
                     _devices_kw: str = "devices", device_type: str | None = None) -> Any:
            return fork_original(devices=devices, enabled=enabled, _caller=_caller,
                                 _devices_kw=_devices_kw, device_type=device_type or "hpu")

        patches.set(torch.random, "fork_rng", ours(fork_rng))


def _unpatched(owner: Any, name: str) -> Any | None:
    """``owner.name`` unless it is already ours (a second start replaces nothing)."""
    value = getattr(owner, name)
    return None if is_ours(value) else value


# ------------------------------------------------------------------ autocast


def is_autocast_enabled() -> bool:
    return torch.is_autocast_enabled("hpu")


def get_autocast_dtype() -> torch.dtype:
    return torch.get_autocast_dtype("hpu")


get_autocast_hpu_dtype = get_autocast_dtype


def set_autocast_dtype(dtype: torch.dtype) -> None:
    torch.set_autocast_dtype("hpu", dtype)


#: Whether ``hpex.kernels.FusedSDPA`` uses its recompute variant when ``recompute_mode`` is
#: None: on by default, as in the bridge's runtime configuration.
_recompute_sdp = [True]


def enable_recompute_sdp(enabled: bool) -> None:
    _recompute_sdp[0] = bool(enabled)


def recompute_sdp_enabled() -> bool:
    return _recompute_sdp[0]


set_autocast_hpu_dtype = set_autocast_dtype


_deterministic = [False]


def setDeterministic(val: bool) -> None:
    """The bridge's own deterministic switch, apart from torch's
    ``use_deterministic_algorithms`` (its kernels take either); deprecated there, with this
    warning. The emulator's CPU kernels give the same results either way; it is kept."""
    warnings.warn(
        "torch.hpu.setDeterministic is deprecated and will be removed in next release. "
        "Please use torch.use_deterministic_algorithms instead.",
        stacklevel=2,
    )
    _deterministic[0] = bool(val)


def getDeterministic() -> bool:
    """The bridge's switch alone (False until ``setDeterministic(True)``), not torch's."""
    warnings.warn(
        "torch.hpu.getDeterministic is deprecated and will be removed in next release. "
        "Please use torch.are_deterministic_algorithms_enabled instead.",
        stacklevel=2,
    )
    return _deterministic[0]


def is_autocast_hpu_enabled() -> bool:
    """The bridge's name for whether HPU autocast is on (``wrap_in_hpu_graph`` keys its
    graphs on it)."""
    return torch.is_autocast_enabled("hpu")


def set_autocast_hpu_enabled(enabled: bool) -> None:
    torch.set_autocast_enabled("hpu", bool(enabled))


@contextlib.contextmanager
def sdp_kernel(enable_recompute: bool = True) -> Iterator[dict[str, Any]]:
    """Selects FusedSDPA's recompute variant inside the block, restoring the setting after."""
    before = recompute_sdp_enabled()
    try:
        enable_recompute_sdp(enable_recompute)
        yield {}
    finally:
        enable_recompute_sdp(before)


# ------------------------------------------------------------------ lazy-mode shims


def enable_dynamic_shape() -> None:
    """The bridge's switch for refining dynamic shapes (``PT_HPU_ENABLE_REFINE_DYNAMIC_SHAPES``,
    ``backend/helpers/dynamic_shape_info.cpp``): kept, and read back by
    ``get_dynamic_shape_status``; the emulator's recipes follow sizes either way."""
    bridge_flags.write("PT_HPU_ENABLE_REFINE_DYNAMIC_SHAPES", True)


def disable_dynamic_shape() -> None:
    bridge_flags.write("PT_HPU_ENABLE_REFINE_DYNAMIC_SHAPES", False)


def get_dynamic_shape_status() -> bool:
    return bool(bridge_flags.read("PT_HPU_ENABLE_REFINE_DYNAMIC_SHAPES"))


def enable_optim_output_sif() -> None:
    """A graph-compiler switch for shape inference of dynamic outputs
    (``PT_HPU_OPTIM_DYNAMIC_OUTPUT_SIF``); kept, no effect on results."""
    bridge_flags.write("PT_HPU_OPTIM_DYNAMIC_OUTPUT_SIF", True)


def disable_optim_output_sif() -> None:
    bridge_flags.write("PT_HPU_OPTIM_DYNAMIC_OUTPUT_SIF", False)


def enable_quantization() -> None:
    """The bridge's quantization switch for the graph compiler; kept, no effect on results."""
    _switches["quantization"] = True


def disable_quantization() -> None:
    _switches["quantization"] = False


def set_sync_debug_mode(debug_mode: Any) -> None:
    """As the bridge: the asynchronous-streams debug switch is an environment variable."""
    os.environ["PT_ENABLE_HABANA_STREAMASYNC"] = str(debug_mode)


def get_sync_debug_mode() -> int:
    return int(os.environ["PT_ENABLE_HABANA_STREAMASYNC"])


def get_gencode_flags() -> str:
    return ""


_switches = {"inference_mode": False, "matmul3d_2d_reshape": False, "quantization": False}


def enable_inference_mode() -> None:
    """The bridge's inference switch (``core.hpu_set_env`` turns it on): it lets the graph
    compiler treat weights as constants; results do not change, so the emulator only keeps it."""
    _switches["inference_mode"] = True


def disable_inference_mode() -> None:
    _switches["inference_mode"] = False


def enable_matmul3d_2d_reshape() -> None:
    """A graph-compiler layout switch of the bridge; no effect on results."""
    _switches["matmul3d_2d_reshape"] = True


def disable_matmul3d_2d_reshape() -> None:
    _switches["matmul3d_2d_reshape"] = False


def fallback_calls() -> int:
    """Emulator only: how many ops the zero-copy CPU fallback has run (for benchmarks)."""
    return int(_ext().fallback_calls())


# ------------------------------------------------------------------ typed tensor aliases


def _tensor_alias(name: str, dtype: torch.dtype) -> type[torch.Tensor]:
    """``torch.hpu.FloatTensor`` and friends: legacy constructors fixed to ``hpu`` and one
    dtype, refusing another device or dtype with the real module's wording."""

    def __new__(cls: type[torch.Tensor], *args: Any, **kwargs: Any) -> torch.Tensor:
        asked = kwargs.get("device")
        if asked is not None and torch.device(asked).type != "hpu":
            raise RuntimeError(
                f"legacy constructor expects device type: hpu but device type: {asked} was "
                "passed"
            )
        asked_dtype = kwargs.get("dtype")
        if asked_dtype is not None and asked_dtype != dtype:
            raise RuntimeError(
                f"legacy constructor expects dtype: {dtype} but dtype: {asked_dtype} was passed"
            )
        kwargs.update(device="hpu", dtype=dtype)
        return torch.Tensor._make_subclass(cls, torch.tensor(*args, **kwargs))

    return type(name, (torch.Tensor,), {"__new__": __new__, "__module__": __name__})


BFloat16Tensor = _tensor_alias("BFloat16Tensor", torch.bfloat16)
BoolTensor = _tensor_alias("BoolTensor", torch.bool)
ByteTensor = _tensor_alias("ByteTensor", torch.uint8)
CharTensor = _tensor_alias("CharTensor", torch.int8)
DoubleTensor = _tensor_alias("DoubleTensor", torch.float64)
FloatTensor = _tensor_alias("FloatTensor", torch.float32)
HalfTensor = _tensor_alias("HalfTensor", torch.float16)
IntTensor = _tensor_alias("IntTensor", torch.int32)
LongTensor = _tensor_alias("LongTensor", torch.int64)
ShortTensor = _tensor_alias("ShortTensor", torch.int16)


# ------------------------------------------------------------------ submodules


def _submodule(name: str, members: tuple[str, ...]) -> ModuleType:
    """``torch.hpu.random`` / ``torch.hpu.memory``, as the real package lays them out."""
    module = ModuleType(f"{__name__}.{name}")
    module.__doc__ = f"torch.hpu.{name} of the Gaudi emulator"
    for member in members:
        setattr(module, member, globals()[member])
    sys.modules[f"torch.hpu.{name}"] = module
    sys.modules[f"habana_frameworks.torch.hpu.{name}"] = module
    return module


random = _submodule(
    "random",
    ("get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
     "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed",
     "default_generators"),
)
memory = _submodule(
    "memory",
    ("memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved",
     "max_memory_reserved", "reset_peak_memory_stats", "reset_accumulated_memory_stats",
     "mem_get_info", "memory_summary"),
)


def _metrics_module() -> ModuleType:
    """``torch.hpu.metrics``: the real metrics API (``metrics.py``), also re-exported here
    as the real package does (``from .metrics import *``)."""
    from hpu_emulator import metrics as module

    sys.modules["torch.hpu.metrics"] = module
    sys.modules["habana_frameworks.torch.hpu.metrics"] = module
    return module


metrics = _metrics_module()


def _graphs_module() -> ModuleType:
    """``torch.hpu.graphs``: HPU graphs (``graphs.py``), importable in either mode as the
    real module is; their names join ``torch.hpu`` only in lazy mode, as the real package
    star-imports them only when ``is_lazy()``."""
    from hpu_emulator import graphs as module
    from hpu_emulator import lazy

    sys.modules["torch.hpu.graphs"] = module
    sys.modules["habana_frameworks.torch.hpu.graphs"] = module
    if lazy.is_lazy():
        for name, value in module.public_names():
            globals()[name] = value
    return module


graphs = _graphs_module()
metric_global = metrics.metric_global
metric_localcontext = metrics.metric_localcontext
metrics_dump = metrics.metrics_dump
MetricNotFound = metrics.MetricNotFound
