"""What the emulated server looks like and which of its devices this process sees.

Read from the environment once, before anything is built, so that a bad value is reported
with the variable's name and the accepted values before any work starts. Pure Python: no
torch import.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from hpu_plugin.emulation.errors import EmulationError

GIB = 1024**3

#: generation name -> (name get_device_name() returns, default memory per device)
GENERATIONS: dict[str, tuple[str, int]] = {
    "gaudi": ("GAUDI", 32 * GIB),
    "gaudi2": ("GAUDI2", 96 * GIB),
    "gaudi3": ("GAUDI3", 128 * GIB),
}
_OFF = {"", "0", "false", "no", "off"}
_ON_MEANS_GAUDI2 = {"1", "true", "yes", "on"}
_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1000, "kib": 1024, "m": 1024**2, "mb": 1000**2,
          "mib": 1024**2, "g": GIB, "gb": 1000**3, "gib": GIB, "t": 1024**4, "tb": 1000**4,
          "tib": 1024**4}
MAX_DEVICES = 8


@dataclass(frozen=True)
class EmulatorConfig:
    generation: str  # gaudi | gaudi2 | gaudi3
    device_name: str  # GAUDI | GAUDI2 | GAUDI3
    server_modules: tuple[int, ...]  # module id of each server device, in index order
    visible_indices: tuple[int, ...]  # server indices this process sees, in its order
    module_id: int  # the module this process acquires
    memory: int  # bytes per device
    int64_supported: bool
    fp16_supported: bool
    lazy: bool

    @property
    def device_count(self) -> int:
        return len(self.visible_indices)

    @property
    def visible_modules(self) -> tuple[int, ...]:
        return tuple(self.server_modules[i] for i in self.visible_indices)


def _int_list(name: str, value: str, accepted: str) -> list[int]:
    parts = [p.strip() for p in value.split(",")]
    if not all(re.fullmatch(r"\d+", p) for p in parts):
        raise EmulationError(
            f"{name}={value!r} is not a comma-separated list of integers; accepted: {accepted}"
        )
    numbers = [int(p) for p in parts]
    if len(set(numbers)) != len(numbers):
        raise EmulationError(f"{name}={value!r} repeats an entry; accepted: {accepted}")
    return numbers


def parse_memory(value: str) -> int:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", value)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _UNITS or float(match.group(1)) <= 0:
        raise EmulationError(
            f"HPU_PLUGIN_EMULATE_MEMORY={value!r} is not a memory size; accepted: a positive "
            "number with an optional unit, e.g. 96GiB, 512MiB, 1073741824"
        )
    return int(float(match.group(1)) * _UNITS[unit])


def _flag(environ: Mapping[str, str], name: str, default: bool) -> bool:
    value = environ.get(name)
    if value is None or not value.strip():
        return default
    return value.strip().lower() not in _OFF


@dataclass(frozen=True)
class Server:
    generation: str
    device_name: str
    modules: tuple[int, ...]
    memory: int
    container_indices: tuple[int, ...]  # what HABANA_VISIBLE_DEVICES leaves


def server(environ: Mapping[str, str] = os.environ) -> Server:
    """The emulated server as ``hl-smi`` shows it; an EmulationError for a bad variable."""
    raw = environ.get("HPU_PLUGIN_EMULATE", "").strip()
    key = raw.lower()
    if key in _ON_MEANS_GAUDI2:
        key = "gaudi2"
    if key not in GENERATIONS:
        raise EmulationError(
            f"HPU_PLUGIN_EMULATE={raw!r} names no Gaudi generation; accepted: 1 (Gaudi2), "
            "gaudi, gaudi2, gaudi3 (any case), or unset/0 to turn emulation off"
        )
    device_name, default_memory = GENERATIONS[key]

    devices_raw = environ.get("HPU_PLUGIN_EMULATE_DEVICES", "").strip()
    modules_raw = environ.get("HPU_PLUGIN_EMULATE_MODULES", "").strip()
    if devices_raw:
        if not re.fullmatch(r"\d+", devices_raw) or not 1 <= int(devices_raw) <= MAX_DEVICES:
            raise EmulationError(
                f"HPU_PLUGIN_EMULATE_DEVICES={devices_raw!r} is not a device count; accepted: "
                f"an integer from 1 to {MAX_DEVICES} (a server has at most {MAX_DEVICES})"
            )
        count = int(devices_raw)
    else:
        count = None
    accepted_modules = (
        "distinct integers 0..7, one per emulated device in index order, e.g. 0,1,2,3"
    )
    if modules_raw:
        modules = _int_list("HPU_PLUGIN_EMULATE_MODULES", modules_raw, accepted_modules)
        if any(m >= MAX_DEVICES for m in modules) or len(modules) > MAX_DEVICES:
            raise EmulationError(
                f"HPU_PLUGIN_EMULATE_MODULES={modules_raw!r} is out of range; accepted: "
                + accepted_modules
            )
        if count is not None and count != len(modules):
            raise EmulationError(
                f"HPU_PLUGIN_EMULATE_MODULES={modules_raw!r} lists {len(modules)} module ids but"
                f" HPU_PLUGIN_EMULATE_DEVICES={devices_raw}; accepted: as many ids as devices"
            )
    else:
        modules = list(range(count if count is not None else MAX_DEVICES))

    memory_raw = environ.get("HPU_PLUGIN_EMULATE_MEMORY", "").strip()
    memory = parse_memory(memory_raw) if memory_raw else default_memory

    # What the process sees: the container runtime's indices, then module ids.
    visible = list(range(len(modules)))
    devices_sel = environ.get("HABANA_VISIBLE_DEVICES", "").strip()
    if devices_sel and devices_sel.lower() != "all":
        indices = _int_list(
            "HABANA_VISIBLE_DEVICES", devices_sel,
            f"distinct device indices 0..{len(modules) - 1} of the emulated server",
        )
        bad = [i for i in indices if i >= len(modules)]
        if bad:
            raise EmulationError(
                f"HABANA_VISIBLE_DEVICES={devices_sel!r} names device index {bad[0]}, which the "
                f"emulated server lacks; accepted: indices 0..{len(modules) - 1} "
                "(HPU_PLUGIN_EMULATE_DEVICES sets how many there are)"
            )
        visible = indices
    return Server(key, device_name, tuple(modules), memory, tuple(visible))


def read(environ: Mapping[str, str] = os.environ) -> EmulatorConfig:
    """The configuration, or an EmulationError naming the variable and accepted values."""
    srv = server(environ)
    key, device_name, memory = srv.generation, srv.device_name, srv.memory
    modules = list(srv.modules)
    visible = list(srv.container_indices)
    modules_sel = environ.get("HABANA_VISIBLE_MODULES", "").strip()
    if modules_sel:
        present = [modules[i] for i in visible]
        wanted = _int_list(
            "HABANA_VISIBLE_MODULES", modules_sel,
            f"distinct module ids among {','.join(map(str, present))}",
        )
        missing = [m for m in wanted if m not in present]
        if missing:
            raise EmulationError(
                f"HABANA_VISIBLE_MODULES={modules_sel!r} names module id {missing[0]}, which is "
                f"not visible; accepted: module ids among {','.join(map(str, present))} "
                "(see `hl-smi -Q index,module_id -f csv`)"
            )
        visible = [modules.index(m) for m in wanted]
    visible_modules = [modules[i] for i in visible]

    module_id = _acquired_module(environ, visible_modules)
    lazy = environ.get("PT_HPU_LAZY_MODE", "1") != "0"
    # Real defaults: int64 on in eager mode, off in lazy mode and always off on Gaudi 1.
    int64 = _flag(environ, "PT_ENABLE_INT64_SUPPORT", default=not lazy and key != "gaudi")
    if key == "gaudi":
        int64 = False
    return EmulatorConfig(
        generation=key,
        device_name=device_name,
        server_modules=tuple(modules),
        visible_indices=tuple(visible),
        module_id=module_id,
        memory=memory,
        int64_supported=int64,
        fp16_supported=key != "gaudi",
        lazy=lazy,
    )


def _acquired_module(environ: Mapping[str, str], visible_modules: list[int]) -> int:
    """The one module a process acquires, chosen as the real stack chooses it."""
    accepted = ",".join(map(str, visible_modules))
    hls = environ.get("HLS_MODULE_ID", "").strip()
    if hls:
        if not re.fullmatch(r"\d+", hls) or int(hls) not in visible_modules:
            raise EmulationError(
                f"HLS_MODULE_ID={hls!r} is not a visible module; accepted: one of {accepted}"
            )
        return int(hls)
    local_rank = environ.get("LOCAL_RANK", "").strip()
    if local_rank and re.fullmatch(r"\d+", local_rank):
        rank = int(local_rank)
        if environ.get("HABANA_VISIBLE_MODULES", "").strip():
            if rank >= len(visible_modules):
                raise EmulationError(
                    f"LOCAL_RANK={rank} has no entry in HABANA_VISIBLE_MODULES={accepted}; "
                    "accepted: one module id per local process"
                )
            return visible_modules[rank]
        if rank >= len(visible_modules):
            raise EmulationError(
                f"LOCAL_RANK={rank} exceeds the {len(visible_modules)} visible Gaudi device(s);"
                " accepted: at most one process per device (HPU_PLUGIN_EMULATE_DEVICES)"
            )
        return visible_modules[rank]
    return visible_modules[0]
