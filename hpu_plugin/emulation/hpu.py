"""``torch.hpu`` of the emulated Gaudi: the public API of ``habana_frameworks.torch.hpu``.

Semantics follow the real module (gaudi-facts §1): ``is_available`` never raises, RNG state
exists for device 0 only, ``manual_seed_all`` is ``manual_seed``, memory statistics are the
allocator's ``InUse``/``MaxInUse``/``Limit``, there is no ``empty_cache``.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from hpu_plugin.emulation import runtime

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
    global _initialized
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
    return int(_ext().current_device())


def set_device(device: Any) -> None:
    index = _index(device)
    _ext().set_device(index)


def get_device_name(device: Any = None) -> str:
    if not is_available():
        warnings.warn("Device not available", stacklevel=2)
        return ""
    return runtime.current_config().device_name


def get_device_capability(device: Any = None) -> tuple[int, int]:
    return {"GAUDI": (1, 0), "GAUDI2": (2, 0), "GAUDI3": (3, 0)}[get_device_name(device)]


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
    cfg = runtime.current_config()
    index = _index(device)
    return _DeviceProperties(cfg.device_name, cfg.memory, cfg.visible_modules[index])


def get_arch_list() -> list[str]:
    return [runtime.current_config().generation]


def can_device_access_peer(device: Any, peer_device: Any) -> bool:
    return False


def synchronize(device: Any = None) -> None:
    """Work is synchronous on the emulator; kept for API parity."""


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return is_available()


class device:
    """Context manager that changes the current HPU device."""

    def __init__(self, device: Any) -> None:
        self.idx = -1 if device is None else _index(device)
        self.prev_idx = -1

    def __enter__(self) -> None:
        if self.idx >= 0:
            self.prev_idx = current_device()
            set_device(self.idx)

    def __exit__(self, *exc: object) -> None:
        if self.prev_idx >= 0:
            set_device(self.prev_idx)


class device_of(device):
    def __init__(self, obj: Any) -> None:
        super().__init__(obj.get_device() if obj.is_hpu else None)


# ------------------------------------------------------------------ streams and events


class Stream(torch.Stream):
    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> Stream:
        return super().__new__(cls, device=torch.device("hpu", _index(device)), priority=priority)


class Event(torch.Event):
    def __new__(cls, enable_timing: bool = False, **kwargs: Any) -> Event:
        return super().__new__(cls, device=torch.device("hpu", current_device()))


def current_stream(device: Any = None) -> torch.Stream:
    return torch.Stream(device=torch.device("hpu", _index(device)))


default_stream = current_stream


@contextlib.contextmanager
def stream(stream: Any) -> Iterator[None]:
    yield


def set_stream(stream: Any) -> None:
    """A single synchronous stream per device."""


# ------------------------------------------------------------------ memory


def memory_stats(device: Any = None) -> dict[str, int]:
    return dict(_ext().memory_stats(_index(device)))


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
    _ext().reset_peak_memory_stats(_index(device))


def reset_max_memory_allocated(device: Any = None) -> None:
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device: Any = None) -> None:
    _ext().reset_accumulated_memory_stats(_index(device))


def mem_get_info(device: Any = None) -> tuple[int, int]:
    stats = memory_stats(device)
    return stats["Limit"] - stats["InUse"], stats["Limit"]


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    stats = memory_stats(device)
    rows = [f"{key:>16}: {value}" for key, value in stats.items()]
    return f"HPU memory summary, device {_index(device)}\n" + "\n".join(rows)


def memory_usage(device: Any = None) -> int:
    stats = memory_stats(device)
    return round(100 * stats["InUse"] / stats["Limit"]) if stats["Limit"] else 0


def utilization(device: Any = None) -> int:
    raise RuntimeError("utilization() needs pyhlml, which the Gaudi emulator does not provide")


# ------------------------------------------------------------------ random


def _generator(index: int = 0) -> torch.Generator:
    return _ext().default_generator(index)


default_generators: tuple[torch.Generator, ...] = ()


def _check_rng_device(device: Any) -> int:
    index = _index(device)
    if index != 0:
        raise ValueError(
            f"RNG state is only available for device 0 (hpu:0), not hpu:{index}: "
            "a Gaudi process owns one device"
        )
    return index


def get_rng_state(device: Any = "hpu") -> torch.Tensor:
    return _generator(_check_rng_device(device)).get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "hpu") -> None:
    _generator(_check_rng_device(device)).set_state(new_state.clone())


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(0)]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    if len(new_states) != 1:
        raise ValueError(f"expected a list of one RNG state (device 0), got {len(new_states)}")
    set_rng_state(new_states[0], 0)


def manual_seed(seed: int) -> None:
    seed = int(seed)
    for index in range(device_count()):
        _generator(index).manual_seed(seed)


manual_seed_all = manual_seed


def seed() -> None:
    value = _generator(0).seed()
    for index in range(1, device_count()):
        _generator(index).manual_seed(value)


seed_all = seed


def initial_seed() -> int:
    return int(_generator(0).initial_seed())


_torch_manual_seed_wrapped = False


def _wrap_torch_manual_seed() -> None:
    """Like the real stack: ``torch.manual_seed`` also reseeds the HPU generators."""
    global _torch_manual_seed_wrapped, default_generators
    default_generators = tuple(_generator(i) for i in range(device_count()))
    if _torch_manual_seed_wrapped:
        return
    original = torch.manual_seed

    @functools.wraps(original)
    def seeded(seed: int) -> torch.Generator:
        result = original(seed)
        manual_seed(seed)
        return result

    torch.manual_seed = seeded
    torch.random.manual_seed = seeded
    _torch_manual_seed_wrapped = True


# ------------------------------------------------------------------ autocast


def is_autocast_enabled() -> bool:
    return torch.is_autocast_enabled("hpu")


def get_autocast_dtype() -> torch.dtype:
    return torch.get_autocast_dtype("hpu")


get_autocast_hpu_dtype = get_autocast_dtype


def set_autocast_dtype(dtype: torch.dtype) -> None:
    torch.set_autocast_dtype("hpu", dtype)


@contextlib.contextmanager
def sdp_kernel(**options: Any) -> Iterator[None]:
    """The real stack selects FusedSDPA variants here; the emulator has one SDPA (CPU's)."""
    yield


# ------------------------------------------------------------------ lazy-mode shims


def enable_dynamic_shape() -> None:
    """Dynamic shapes need no switch in eager mode."""


def disable_dynamic_shape() -> None:
    """Dynamic shapes need no switch in eager mode."""


def fallback_calls() -> int:
    """Emulator only: how many ops the zero-copy CPU fallback has run (for benchmarks)."""
    return int(_ext().fallback_calls())


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
     "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed"),
)
memory = _submodule(
    "memory",
    ("memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved",
     "max_memory_reserved", "reset_peak_memory_stats", "reset_accumulated_memory_stats",
     "mem_get_info", "memory_summary"),
)
