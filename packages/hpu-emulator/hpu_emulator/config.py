"""What the emulated server looks like and which of its devices this process sees.

Read from the environment once, before anything is built, so that a bad value is reported
with the variable's name and the accepted values before any work starts. Pure Python: no
torch import.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from hpu_emulator.errors import EmulationError
from hpu_plugin import settings
from hpu_plugin.errors import SettingError
from hpu_plugin.gaudi import visibility
from hpu_plugin.gaudi.config_error import GaudiConfigError
from hpu_plugin.gaudi.generations import Generation, generation_from_name, int64_on_device
from hpu_plugin.gaudi.modes import mode
from hpu_plugin.gaudi.visibility import MAX_DEVICES

T = TypeVar("T")

GIB = 1024**3

#: What HPU_PLUGIN_EMULATE accepts (any case); every other non-off value is refused.
GENERATION_KEYS = ("gaudi", "gaudi2", "gaudi3")
#: Launcher variables the emulator reads: checked before it starts, so a bad one stops
#: activation before anything runs instead of failing later in the hccl import.
RANK_VARIABLES = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                  "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")


@dataclass(frozen=True)
class EmulatorConfig:
    generation: str  # gaudi | gaudi2 | gaudi3
    device_name: str  # GAUDI | GAUDI2 | GAUDI3
    server_modules: tuple[int, ...]  # module id of each server device, in index order
    visible_indices: tuple[int, ...]  # server indices this process sees, in its order
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


def _gaudi_rule(parse: Callable[[], T]) -> T:
    """Apply a rule of ``hpu_plugin.gaudi``; its refusal becomes the emulator's one error
    type, with the same text (variable, value, what is supported, fix)."""
    try:
        return parse()
    except GaudiConfigError as exc:
        raise EmulationError(str(exc)) from exc


def _int_list(name: str, value: str, accepted: str) -> list[int]:
    """HPU_PLUGIN_EMULATE_MODULES: the emulator's own variable (the Gaudi ones go through
    ``hpu_plugin.gaudi.visibility``)."""
    parts = [p.strip() for p in value.split(",")]
    if not all(re.fullmatch(r"[0-9]{1,3}", p, re.ASCII) for p in parts):
        raise EmulationError(
            f"{name}={value!r} is not a comma-separated list of integers; accepted: {accepted}"
        )
    numbers = [int(p) for p in parts]
    if len(set(numbers)) != len(numbers):
        raise EmulationError(f"{name}={value!r} repeats an entry; accepted: {accepted}")
    return numbers


#: Memory sizes accepted: at least one small tensor, at most 1 PiB (far above any Gaudi,
#: far below overflow of the emulator's int64 sums).
MIN_MEMORY, MAX_MEMORY = 1024**2, 1024**5
MEMORY_UNITS: dict[str, int] = {
    "": 1, "b": 1, "k": 1024, "kb": 1000, "kib": 1024, "m": 1024**2, "mb": 1000**2,
    "mib": 1024**2, "g": 1024**3, "gb": 1000**3, "gib": 1024**3, "t": 1024**4,
    "tb": 1000**4, "tib": 1024**4,
}


def memory_size(variable: str, raw: str) -> int:
    """A memory size in whole bytes: a number with an optional unit (``96GiB``, ``1.5GiB``,
    ``1073741824``), from 1 MiB to 1 PiB; :class:`SettingError` naming ``variable`` else."""
    accepted = ("a whole number of bytes from 1 MiB to 1 PiB, as a number with an optional "
                "unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB), e.g. 96GiB, 512MiB, 1073741824")
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)", raw.strip(), re.ASCII)
    unit = match.group(2).lower() if match else ""
    if match is None or len(match.group(1)) > settings.MAX_DIGITS or unit not in MEMORY_UNITS:
        raise SettingError(variable, raw, accepted)
    whole, _, fraction = match.group(1).partition(".")
    scale = 10 ** len(fraction)
    numerator = (int(whole) * scale + int(fraction or "0")) * MEMORY_UNITS[unit]
    if numerator % scale or not MIN_MEMORY <= numerator // scale <= MAX_MEMORY:
        raise SettingError(variable, raw, accepted)
    return numerator // scale


def parse_memory(value: str) -> int:
    """``HPU_PLUGIN_EMULATE_MEMORY``, as :func:`memory_size` reads it."""
    try:
        return memory_size("HPU_PLUGIN_EMULATE_MEMORY", value)
    except SettingError as exc:
        raise EmulationError(str(exc)) from None


def check_launcher_variables(environ: Mapping[str, str]) -> None:
    """Every launcher variable the emulator reads must be a non-negative integer; a blank
    one too (the bridge's hccl module reads it with ``int()`` and fails its import)."""
    for name in RANK_VARIABLES:
        raw = environ.get(name)
        if raw is not None:
            try:
                settings.rank(name, raw)
            except settings.SettingError as exc:
                raise EmulationError(str(exc)) from None


#: The bridge's metrics file formats and dump triggers (``hpu/metrics/saver.py``).
METRICS_FORMATS = ("json", "text")
METRICS_TRIGGERS = ("process_exit", "mark_step", "metric_change", "user")


def metrics_variable(environ: Mapping[str, str], name: str) -> str | None:
    """A ``PT_HPU_METRICS_*`` variable, or the older ``HABANA_PT_METRICS_*`` spelling."""
    return environ.get(name, environ.get(name.replace("PT_HPU_", "HABANA_PT_", 1)))


def check_metrics_variables(environ: Mapping[str, str]) -> None:
    """A metrics file format or dump trigger the bridge does not know stops the start with
    the fix (the bridge fails its import on it)."""
    form = metrics_variable(environ, "PT_HPU_METRICS_FILE_FORMAT")
    if form is not None and form not in METRICS_FORMATS:
        raise EmulationError(
            f"PT_HPU_METRICS_FILE_FORMAT={form!r} is not a metrics file format; fix: set it to "
            f"one of {', '.join(METRICS_FORMATS)}, or unset it for json")
    triggers = metrics_variable(environ, "PT_HPU_METRICS_DUMP_TRIGGERS") or "process_exit"
    for trigger in triggers.split(","):
        if trigger not in METRICS_TRIGGERS:
            raise EmulationError(
                f"PT_HPU_METRICS_DUMP_TRIGGERS={triggers!r} names {trigger!r}, which is no dump "
                f"trigger; fix: list some of {', '.join(METRICS_TRIGGERS)}, separated by "
                "commas, or unset it")


@dataclass(frozen=True)
class Server:
    generation: str
    device_name: str
    modules: tuple[int, ...]
    memory: int
    container_indices: tuple[int, ...]  # what HABANA_VISIBLE_DEVICES leaves

    @property
    def gaudi(self) -> Generation:
        """The generation's facts, from ``hpu_plugin.gaudi``."""
        return _generation(self.generation)


def _generation(key: str) -> Generation:
    found = generation_from_name(key)
    assert found is not None, key  # every key of GENERATION_KEYS names a generation
    return found


def server(environ: Mapping[str, str] = os.environ) -> Server:
    """The emulated server as ``hl-smi`` shows it; an EmulationError for a bad variable."""
    raw = environ.get("HPU_PLUGIN_EMULATE", "").strip()
    key = raw.lower()
    if key in settings.ON_WORDS:
        key = "gaudi2"
    if key not in GENERATION_KEYS:
        raise EmulationError(
            f"HPU_PLUGIN_EMULATE={raw!r} names no Gaudi generation; accepted: 1 (Gaudi2), "
            "gaudi, gaudi2, gaudi3 (any case), or unset/0 to turn emulation off"
        )
    generation = _generation(key)

    devices_raw = environ.get("HPU_PLUGIN_EMULATE_DEVICES", "").strip()
    modules_raw = environ.get("HPU_PLUGIN_EMULATE_MODULES", "").strip()
    if devices_raw:
        if (not re.fullmatch(r"[0-9]{1,2}", devices_raw, re.ASCII)
                or not 1 <= int(devices_raw) <= MAX_DEVICES):
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
    memory = parse_memory(memory_raw) if memory_raw else generation.memory_gib * GIB

    # What the process sees: the container runtime's indices (the syntax is gaudi/'s rule;
    # whether the indices exist is a fact of this emulated server).
    indices = _gaudi_rule(lambda: visibility.visible_devices(environ))
    visible = list(range(len(modules))) if indices is None else list(indices)
    bad = [i for i in visible if i >= len(modules)]
    if bad:
        raise EmulationError(
            f"{visibility.DEVICES}={environ[visibility.DEVICES]!r} names device index {bad[0]}, "
            f"which the emulated server lacks; accepted: indices 0..{len(modules) - 1} "
            "(HPU_PLUGIN_EMULATE_DEVICES sets how many there are)"
        )
    return Server(key, generation.name, tuple(modules), memory, tuple(visible))


def read(environ: Mapping[str, str] = os.environ) -> EmulatorConfig:
    """The configuration, or an EmulationError naming the variable and accepted values."""
    srv = server(environ)
    check_launcher_variables(environ)
    modules = list(srv.modules)
    visible = list(srv.container_indices)
    wanted = _gaudi_rule(lambda: visibility.visible_modules(environ))
    if wanted is not None:
        # hl-smi's view inside the container: index -> module id of each device it shows
        shown = {i: modules[i] for i in visible}
        _gaudi_rule(
            lambda: visibility.check_modules_exist(
                wanted, shown, visibility.MODULES, environ[visibility.MODULES]
            )
        )
        visible = [modules.index(m) for m in wanted]
    chosen_module(environ, [modules[i] for i in visible])
    generation = srv.gaudi
    return EmulatorConfig(
        generation=srv.generation,
        device_name=generation.name,
        server_modules=tuple(modules),
        visible_indices=tuple(visible),
        memory=srv.memory,
        int64_supported=_gaudi_rule(lambda: int64_on_device(generation, environ)),
        fp16_supported=generation.fp16,
        lazy=_gaudi_rule(lambda: mode(environ).name == "lazy"),
    )


def chosen_module(environ: Mapping[str, str], visible_modules: list[int]) -> int | None:
    """The module ``HLS_MODULE_ID`` chooses, or None; a value that names no visible module
    is refused when the emulator starts, as the plugin refuses it."""
    accepted = ",".join(map(str, visible_modules))
    raw = environ.get(visibility.MODULE_ID)
    own = _gaudi_rule(lambda: visibility.parse_module_id(raw))
    if own is not None:
        if own not in visible_modules:
            raise EmulationError(
                str(
                    visibility.VisibilityError(
                        visibility.MODULE_ID,
                        raw,
                        f"one of {accepted} (the visible module ids)",
                        f"set {visibility.MODULE_ID} to one of {accepted}, or unset it",
                        problem=f"module {own} is not visible to this process",
                    )
                )
            )
    return own


def acquired_module(environ: Mapping[str, str], visible_modules: list[int]) -> int:
    """The one module a process acquires at its first device use, chosen as the real stack
    chooses it; a process that never uses the device never asks, so a local rank beyond the
    devices (a CPU-only job) is refused only here."""
    own = chosen_module(environ, visible_modules)
    if own is not None:
        return own
    accepted = ",".join(map(str, visible_modules))
    local_rank = environ.get("LOCAL_RANK", "").strip()
    if local_rank and re.fullmatch(r"[0-9]{1,3}", local_rank, re.ASCII):
        rank = int(local_rank)
        if environ.get(visibility.MODULES, "").strip():
            if len(visible_modules) == 1:
                return visible_modules[0]  # one module per worker (Ray, Kubernetes)
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
