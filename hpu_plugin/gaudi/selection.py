"""Which module each process of a job takes, and whether the group can work.

Facts (Intel Gaudi documentation, multiple Gaudi cards per server, ``HABANA_VISIBLE_MODULES``;
the bridge's hccl import): local rank ``i`` takes entry ``i`` of
``HABANA_VISIBLE_MODULES`` (the hccl import sets ``HLS_MODULE_ID`` from it), or module ``i``
when the variable is unset; every process of a job must see the same value. On part of a
server only groups of 2 and 4 devices are supported, with the module ids
``0,1 | 2,3 | 4,5 | 6,7`` and ``0,1,2,3 | 4,5,6,7``; 8 is the whole server; one device is
fine for a job that is not distributed. A wrong group does not fail cleanly on Gaudi: it
hangs or fails in the first collective, so it is refused here, before process-group
initialisation.

Module ids inside virtual machines can be arbitrary (a VM may get modules 1,4,5,2:
DeepSpeed#5929), and there the documented combinations say nothing about which groups are
wired together. So the combination rule is enforced (an error) only when the host's module
ids show the physical numbering: the whole server ``0..7``, or a set that is itself one of
the supported groups (a container given a supported group). On any other layout, or when
``hl-smi`` is not there to tell, an unlisted combination is a warning. Group *size* and
one-process-per-device are enforced on every layout: they do not depend on numbering.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from hpu_plugin import settings
from hpu_plugin.gaudi import visibility
from hpu_plugin.gaudi.config_error import GaudiConfigError
from hpu_plugin.gaudi.visibility import MAX_DEVICES, MODULE_ID, MODULES
from hpu_plugin.reporting import say_once

SUPPORTED_GROUPS: Mapping[int, tuple[tuple[int, ...], ...]] = {
    2: ((0, 1), (2, 3), (4, 5), (6, 7)),
    4: ((0, 1, 2, 3), (4, 5, 6, 7)),
    8: (tuple(range(8)),),
}
WHOLE_SERVER = frozenset(range(MAX_DEVICES))
LAUNCH_FIX = (
    "launch one process per device (accelerate launch --num_processes, torchrun --nproc-per-node)"
)

Layout = Literal["server", "group", "arbitrary", "unknown"]
HostModules = Sequence[int] | Mapping[int, int] | None


class PlacementError(GaudiConfigError):
    """A distributed job whose devices cannot work together."""


def _ids(modules: Iterable[int]) -> str:
    return ",".join(map(str, modules))


def supported_groups_text() -> str:
    return (
        "groups of 2 devices with module ids 0,1 | 2,3 | 4,5 | 6,7; groups of 4 with "
        "0,1,2,3 | 4,5,6,7; all 8 (the whole server); 1 device for a job that is not distributed"
    )


def host_layout(host_modules: HostModules) -> Layout:
    """How far module ids on this host can be trusted to follow the physical layout."""
    if host_modules is None:
        return "unknown"
    modules = frozenset(
        host_modules.values() if isinstance(host_modules, Mapping) else host_modules
    )
    if modules == WHOLE_SERVER:
        return "server"
    if tuple(sorted(modules)) in SUPPORTED_GROUPS.get(len(modules), ()):
        return "group"
    return "arbitrary"


def is_supported_group(modules: Sequence[int]) -> bool:
    return tuple(sorted(modules)) in SUPPORTED_GROUPS.get(len(modules), ())


def group_name(modules: Sequence[int]) -> str:
    size = len(modules)
    if size == MAX_DEVICES and is_supported_group(modules):
        return "whole server"
    if is_supported_group(modules):
        return f"supported group of {size}"
    return f"unlisted group of {size}"


def _suggest(size: int, modules: Sequence[int], host: frozenset[int] | None) -> str:
    """A supported group of ``size``, preferring one that holds the first chosen module."""
    candidates = [g for g in SUPPORTED_GROUPS.get(size, ()) if host is None or set(g) <= host]
    for group in candidates:
        if modules and modules[0] in group:
            return ",".join(map(str, group))
    return ",".join(map(str, candidates[0])) if candidates else ""


@dataclass(frozen=True)
class JobPlacement:
    """Where this process runs, and what the checks found (warnings never stop the job)."""

    world_size: int
    local_world_size: int
    local_rank: int
    modules: tuple[int, ...] | None  # module of each local rank; None: any (not distributed)
    module_id: int | None  # this process's module; None: the Gaudi software picks
    group: str  # "whole server", "supported group of 2", "single device", ...
    layout: Layout
    enforced: bool  # whether the module-id combination rule applied as an error
    warnings: tuple[str, ...] = field(default=())
    #: each process of the node was given its own module (Ray, Kubernetes): the node's group
    #: is known only across ranks, and the pre-flight check verifies it
    per_process: bool = False

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def log_warnings(self, logger: logging.Logger) -> None:
        """Log each warning once per process, however often the job is checked."""
        for warning in self.warnings:
            say_once(("placement", warning), logging.WARNING, "hpu_plugin: %s", warning,
                     logger=logger)


def _positive(variable: str, value: int, minimum: int, fix: str) -> None:
    """Refuse a launcher number below ``minimum``, naming the variable."""
    if value < minimum:
        raise PlacementError(variable, value, f"an integer >= {minimum}", fix)


def check_distributed_job(
    environ: Mapping[str, str],
    world_size: int,
    local_world_size: int,
    local_rank: int,
    host_modules: HostModules = None,
    group: bool = True,
) -> JobPlacement:
    """Check a job's device selection before any collective; raise :class:`PlacementError`
    (or another :class:`GaudiConfigError`) naming the variable, its value and the fix.

    ``host_modules`` is what ``hl-smi`` shows: the index-to-module-id map
    (:func:`hpu_plugin.machine.index_module_map`; lets the error translate indices given
    as module ids) or just the module ids, or ``None`` when unknown. ``group=False`` checks
    only what this process takes: the rules of an HCCL group apply when one starts, and
    processes that never start one (each its own inference) may be any number.
    """
    _check_launch(world_size, local_world_size, local_rank)
    raw_modules = environ.get(MODULES)
    visible = visibility.parse_visible_modules(raw_modules)
    # HABANA_VISIBLE_DEVICES is not read here: it acts at `docker run`, not in the process,
    # so a value the runtime accepted cannot make the job fail (``hpu-plugin doctor`` shows it).
    warnings: list[str] = []
    own = visibility.parse_module_id(environ.get(MODULE_ID))
    node = _Node(host_layout(host_modules), *_host_maps(host_modules))
    if world_size == 1:
        return _single_process(environ, own, visible, node)
    if local_world_size > MAX_DEVICES:
        raise PlacementError(
            "LOCAL_WORLD_SIZE",
            local_world_size,
            f"at most {MAX_DEVICES} processes per server (one per device)",
            LAUNCH_FIX,
        )
    if visible is not None and len(visible) == 1 and local_world_size > 1:
        return _one_module_per_process(environ, world_size, local_world_size, local_rank, node)
    modules = _node_modules(visible, raw_modules, local_world_size, warnings)
    if group:
        _check_group(environ, modules, visible, world_size, node, warnings)
    if own is not None and own != modules[local_rank]:
        warnings.append(
            f"{MODULE_ID}={own} is set, and hccl keeps a module id that is set: this process "
            f"takes module {own}, not {modules[local_rank]} (the {MODULES} entry for local "
            f"rank {local_rank}); unset {MODULE_ID} to let the local rank choose"
        )
    return JobPlacement(
        world_size,
        local_world_size,
        local_rank,
        tuple(modules),
        modules[local_rank] if own is None else own,
        group_name(modules) if len(modules) > 1 else "single device per node",
        node.layout,
        node.layout in ("server", "group"),
        tuple(warnings),
    )


@dataclass(frozen=True)
class _Node:
    """What ``hl-smi`` says about this server, in the forms the checks need."""

    layout: Layout
    index_map: Mapping[int, int] | None
    host: frozenset[int] | None


def _check_launch(world_size: int, local_world_size: int, local_rank: int) -> None:
    """The launcher's own numbers must be consistent before any device rule means anything."""
    _positive("WORLD_SIZE", world_size, 1, LAUNCH_FIX)
    _positive("LOCAL_WORLD_SIZE", local_world_size, 1, LAUNCH_FIX)
    if local_world_size > world_size:
        raise PlacementError(
            "LOCAL_WORLD_SIZE", local_world_size, f"at most WORLD_SIZE ({world_size})", LAUNCH_FIX
        )
    if not 0 <= local_rank < local_world_size:
        raise PlacementError(
            "LOCAL_RANK",
            local_rank,
            f"0 to LOCAL_WORLD_SIZE-1 ({local_world_size - 1})",
            LAUNCH_FIX,
        )


def _host_maps(
    host_modules: HostModules,
) -> tuple[Mapping[int, int] | None, frozenset[int] | None]:
    if isinstance(host_modules, Mapping):
        return host_modules, frozenset(host_modules.values())
    if host_modules is None:
        return None, None
    host = frozenset(host_modules)
    return {m: m for m in host}, host  # ids only: no index translation to offer


def _single_process(
    environ: Mapping[str, str], own: int | None, visible: tuple[int, ...] | None, node: _Node
) -> JobPlacement:
    chosen = (own,) if own is not None else visible[:1] if visible else None
    if chosen is not None and node.index_map is not None:
        variable = MODULE_ID if own is not None else MODULES
        visibility.check_modules_exist(chosen, node.index_map, variable, environ.get(variable))
    return JobPlacement(
        1, 1, 0, chosen, chosen[0] if chosen else None, "single device", node.layout, False
    )


def _one_module_per_process(
    environ: Mapping[str, str],
    world_size: int,
    local_world_size: int,
    local_rank: int,
    node: _Node,
) -> JobPlacement:
    """One module listed, several processes on the node: each process was given its own.

    Ray (``resources_per_worker={"HPU": 1}``) and the Kubernetes Gaudi device plugin give
    every worker exactly its module in ``HABANA_VISIBLE_MODULES``, with ``LOCAL_RANK`` the
    node-local rank. The Gaudi software acquires a device by type among the visible ones, so
    the process takes the one module it sees, whatever its local rank. Whether the node's
    processes hold different modules forming a supported group can only be seen across
    ranks: the pre-flight check (:mod:`hpu_plugin.gaudi.preflight`) compares them.
    """
    raw = environ.get(MODULES)
    (module,) = visibility.parse_visible_modules(raw) or ()
    if node.index_map is not None:
        visibility.check_modules_exist((module,), node.index_map, MODULES, raw)
    return JobPlacement(
        world_size,
        local_world_size,
        local_rank,
        (module,),
        module,
        "one module per process",
        node.layout,
        node.layout in ("server", "group"),
        per_process=True,
    )


def _node_modules(
    visible: tuple[int, ...] | None,
    raw_modules: str | None,
    local_world_size: int,
    warnings: list[str],
) -> tuple[int, ...]:
    """Local rank ``i`` takes entry ``i`` of the visible list, or module ``i`` without one."""
    if visible is None:
        return tuple(range(local_world_size))
    if len(visible) < local_world_size:
        raise PlacementError(
            MODULES,
            raw_modules,
            "one module id per process of the node, or exactly one (each process its own)",
            f"list {local_world_size} module ids, or launch {len(visible)} process(es)",
            problem=f"it lists {len(visible)} module(s) for {local_world_size} processes; "
            f"local rank {len(visible)} would have no device",
        )
    if len(visible) > local_world_size:
        warnings.append(
            f"{MODULES}={raw_modules} lists {len(visible)} modules for {local_world_size} "
            f"processes: modules {_ids(visible[local_world_size:])} stay unused"
        )
    return visible[:local_world_size]


def _check_group(
    environ: Mapping[str, str],
    modules: Sequence[int],
    visible: tuple[int, ...] | None,
    world_size: int,
    node: _Node,
    warnings: list[str],
) -> None:
    """Size, presence on the host, then the module-id combination of the node's group."""
    raw_modules = environ.get(MODULES)
    variable, value = (
        (MODULES, raw_modules) if visible is not None else ("LOCAL_WORLD_SIZE", len(modules))
    )
    check_group_size(variable, value, modules, node.host)
    if visible is not None and node.index_map is not None:
        visibility.check_modules_exist(visible, node.index_map, MODULES, raw_modules)
    if visible is None and node.host is not None:
        _check_default_modules_present(modules, node.host)
    if len(modules) == 1:
        warnings.append(
            f"one device per node in a {world_size}-process job is not among the documented "
            "partial-server groups (2 or 4 devices)"
        )
        return
    warning = check_combination(modules, raw_modules if visible is not None else None, node)
    if warning:
        warnings.append(warning)


def check_group_size(
    variable: str, value: object, modules: Sequence[int], host: frozenset[int] | None
) -> None:
    """A group of 3 is wrong whatever the module ids are."""
    size = len(modules)
    if size in SUPPORTED_GROUPS or size == 1:
        return
    pick = _suggest(2, modules, host) or "0,1"
    raise PlacementError(
        variable,
        value,
        supported_groups_text(),
        f"run 2 or 4 processes per node on a supported group, e.g. {MODULES}={pick} "
        "with 2 processes (accelerate launch --num_processes 2, torchrun --nproc-per-node 2)",
        problem=f"a group of {size} devices ({size} processes on this node); Gaudi supports "
        "partial-server groups of 2 or 4 only",
    )


def _check_default_modules_present(modules: Sequence[int], host: frozenset[int]) -> None:
    size = len(modules)
    if set(modules) <= host:
        return
    pick = _suggest(size, sorted(host), host) or _ids(sorted(host)[:size])
    raise PlacementError(
        MODULES,
        None,
        f"module ids present on this host: {_ids(sorted(host))}",
        f"set {MODULES}={pick}"
        if len(host) >= size
        else f"this host has {len(host)} device(s): {LAUNCH_FIX}",
        problem=f"local rank i then takes module i (0..{size - 1}), and "
        f"module(s) {_ids(m for m in modules if m not in host)} are not on this host",
    )


def check_combination(modules: Sequence[int], raw_modules: str | None, node: _Node) -> str:
    """Raise for an unlisted combination where module ids follow the physical numbering;
    elsewhere return the warning (empty when the group is supported)."""
    if is_supported_group(modules):
        return ""
    size = len(modules)
    pick = _suggest(size, modules, node.host)
    problem = f"module ids {_ids(modules)} are not a supported group of {size}"
    if raw_modules is None:
        problem += " (local rank i takes module i)"
    if node.layout in ("server", "group"):
        raise PlacementError(
            MODULES,
            raw_modules,
            f"for {size} devices, module ids "
            + " | ".join(_ids(g) for g in SUPPORTED_GROUPS[size]),
            f"set {MODULES}={pick}"
            + (f" (or another supported group of {size})" if size < 8 else ""),
            problem=problem,
        )
    why = "unknown: no hl-smi" if node.layout == "unknown" else "not the 0..7 layout, as in a VM"
    return (
        f"{problem}; not enforced because this host's module ids ({why}) "
        "may not follow the documented numbering"
    )


#: Where launchers put the number of processes on this server: torchrun and accelerate launch,
#: DeepSpeed's launcher, Open MPI.
LOCAL_SIZES = ("LOCAL_WORLD_SIZE", "LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE")


def _env_int(environ: Mapping[str, str], names: Sequence[str]) -> tuple[str, int] | None:
    for name in names:
        raw = environ.get(name)
        if raw is None:
            continue
        try:  # the settings parser: ASCII digits, a bounded length
            return name, settings.integer(name, raw)
        except settings.SettingError:
            raise PlacementError(
                name,
                raw,
                "an integer",
                "let the launcher (torchrun, accelerate launch, mpirun) set it, not by hand",
            ) from None
    return None


def job_from_environ(environ: Mapping[str, str]) -> tuple[int, int, int] | None:
    """``(world_size, local_world_size, local_rank)`` as the launcher set them, or ``None``
    outside a launcher. Reads torchrun's variables, then Open MPI's, as the hccl import does;
    the processes on this server also from DeepSpeed's launcher, which sets ``LOCAL_SIZE``."""
    world = _env_int(environ, ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"))
    if world is None:
        return None
    local_rank = _env_int(environ, ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"))
    local_world = _env_int(environ, LOCAL_SIZES)
    rank = local_rank[1] if local_rank else 0
    if local_world is None and world[1] > MAX_DEVICES:
        raise PlacementError(
            "LOCAL_WORLD_SIZE", None, "the number of processes on each server, which a job of "
            f"{world[1]} processes (WORLD_SIZE) over servers of at most {MAX_DEVICES} devices "
            "needs", "launch with torchrun, accelerate launch, deepspeed or mpirun, which set "
            "it (or LOCAL_SIZE), or set LOCAL_WORLD_SIZE yourself")
    # Without a local size a single-node job is assumed, the common case on Gaudi.
    size = local_world[1] if local_world else world[1]
    return world[1], size, rank


def check_job_from_environ(
    environ: Mapping[str, str], host_modules: HostModules = None, group: bool = True
) -> JobPlacement | None:
    """:func:`check_distributed_job` with the launcher's variables; ``None`` outside a launcher."""
    job = job_from_environ(environ)
    if job is None:
        return None
    return check_distributed_job(environ, *job, host_modules=host_modules, group=group)


def describe_mesh(shape: Sequence[int], names: Sequence[str] | None = None) -> str:
    """A mesh as a user wrote it: ``tp=2 x fsdp=2``, or ``(2, 2)`` without dimension names."""
    if names and len(names) == len(shape):
        return " x ".join(f"{name}={size}" for name, size in zip(names, shape, strict=True))
    return str(tuple(shape))


def check_mesh(
    environ: Mapping[str, str],
    shape: Sequence[int],
    names: Sequence[str] | None = None,
    host_modules: HostModules = None,
) -> tuple[str, ...]:
    """The devices a device mesh takes on this node, against the Gaudi rule of groups.

    A mesh (``init_device_mesh``, which Transformers' ``tp_plan``/``DistributedConfig`` and
    Accelerate's ``ParallelismConfig`` build) holds ranks ``0 .. prod(shape)-1``. A mesh over
    the whole job puts the job's processes of each node in its groups: those must be 2 or 4
    devices, or the whole server, as for any job on Gaudi. Checked where the mesh is built,
    before it starts the process group, so the error names the mesh sizes to change (the
    module ids of the node's group are the job check's, which runs when the group starts).

    A mesh over part of the job (a sub-mesh) is a group inside a workload the rules already
    accepted; the documented groups are those of a workload, and whether HCCL runs a smaller
    communicator on other devices is not documented, so there it is a warning. Raises
    :class:`PlacementError`; returns the warnings. Nothing is checked outside a launcher,
    for a mesh bigger than the job (torch refuses it), or in a process the mesh does not hold.
    """
    job = job_from_environ(environ)
    if job is None:
        return ()
    world_size, local_world_size, local_rank = job
    size = 1
    for extent in shape:
        size *= int(extent)
    if size > world_size or size < 1:
        return ()
    found = _env_int(environ, ("RANK", "OMPI_COMM_WORLD_RANK"))
    base = (found[1] if found else local_rank) - local_rank  # ranks of a node are contiguous
    local = [r - base for r in range(size) if base <= r < base + local_world_size]
    if local_rank not in local:
        return ()
    mesh = describe_mesh(shape, names)
    held = f"{len(local)} of this node's {local_world_size} devices"
    supported_size = len(local) in SUPPORTED_GROUPS or len(local) == 1
    if size == world_size:
        if supported_size:
            return ()
        raise PlacementError(
            "device mesh", mesh, supported_groups_text(),
            "give the mesh 2, 4 or 8 devices per node: launch that many processes per node "
            "and make the product of the mesh sizes the job's size (e.g. tp_size=4 with "
            "torchrun --nproc-per-node 4, or tp_size=2 x fsdp_size=2)",
            problem=f"it spans {held}, a group of {len(local)}; Gaudi runs groups of 2 or 4 "
            "devices or the whole server",
        )
    documented = (
        "not enforced: Gaudi documents the groups a workload may take (2 or 4 devices with "
        "module ids 0,1 | 2,3 | 4,5 | 6,7 and 0,1,2,3 | 4,5,6,7, or all 8), not the "
        "communicators inside one"
    )
    if not supported_size:
        return (f"device mesh {mesh}: a sub-mesh spanning {held}, a group of {len(local)}; "
                f"{documented}",)
    raw_modules = environ.get(MODULES)
    visible = visibility.parse_visible_modules(raw_modules)
    if len(local) == 1 or (visible is not None and len(visible) == 1):
        return ()  # one device, or one module per process (compared by the pre-flight check)
    node_modules = visible[:local_world_size] if visible else tuple(range(local_world_size))
    if len(node_modules) < local_world_size:
        return ()  # the job check refuses the selection itself, naming the variable
    modules = [node_modules[i] for i in local]
    if is_supported_group(modules) or host_layout(host_modules) not in ("server", "group"):
        return ()
    return (f"device mesh {mesh}: a sub-mesh spanning {held}, modules {_ids(modules)}, not a "
            f"listed group of {len(modules)}; {documented}",)
