"""The ``hccl`` collective backend of the emulator: Gloo under an HPU-only registration.

Registered for device type ``hpu`` only, so a collective on CPU tensors finds no backend and
fails, as on real HCCL; HPU tensors reach Gloo through the C++ fallback's shadow group.
A barrier of an ``hccl`` group goes straight to its backend, as the bridge's
``ProcessGroupHCCL::barrier`` ignores ``BarrierOptions`` (see ``_hccl_barrier``).
"""

from __future__ import annotations

import atexit
import os
import weakref
from collections.abc import Callable
from typing import Any

from hpu_plugin.gaudi import selection


def initialize_distributed_hpu(world_size: int | None = None, rank: int | None = None,
                               local_rank: int | None = None) -> tuple[int, int, int]:
    """What the real ``hccl`` module does at import, and again when a custom launcher calls
    it with all three values (Gaudi's documented way to set up a job by hand): those values
    are exported; otherwise Open MPI's rank variables are mapped, all three or none, unless
    the job's own are all set. ``HLS_MODULE_ID`` is the user's when set; else a local rank
    of a job of several processes pins its module. Returns ``(world_size, rank,
    local_rank)``, ``-1`` for what is unknown."""
    env = os.environ
    ours = ("LOCAL_RANK", "WORLD_SIZE", "RANK")
    if world_size is not None and rank is not None and local_rank is not None:
        env.update(WORLD_SIZE=str(world_size), RANK=str(rank), LOCAL_RANK=str(local_rank))
    else:
        mpi = ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK")
        if not all(name in env for name in ours):
            if all(name in env for name in mpi):
                env.update({target: env[source] for source, target in zip(mpi, ours, strict=True)})
            env.setdefault("MASTER_ADDR", "localhost")
            env.setdefault("MASTER_PORT", "12345")
    world_size = int(env.get("WORLD_SIZE", "1"))
    rank = int(env.get("RANK", "-1"))
    local_rank = int(env.get("LOCAL_RANK", "-1"))
    if world_size > 1 and local_rank != -1 and "HLS_MODULE_ID" not in env:
        from hpu_emulator import runtime

        runtime.fix_acquisition_if_device_used()
        visible = [m.strip() for m in env.get("HABANA_VISIBLE_MODULES", "").split(",") if m.strip()]
        if visible and local_rank >= len(visible):  # the bridge asserts it here
            raise AssertionError(
                f"There is not enough devices available for training: LOCAL_RANK={local_rank} "
                f"but HABANA_VISIBLE_MODULES={env['HABANA_VISIBLE_MODULES']} lists "
                f"{len(visible)} Gaudi modules; start at most one process per module "
                "(torchrun --nproc-per-node), or set HABANA_VISIBLE_MODULES correctly")
        if visible or local_rank < len(runtime.current_config().visible_modules):
            env["HLS_MODULE_ID"] = visible[local_rank] if visible else str(local_rank)
        # Else the bridge names a module the server lacks, which fails only when the process
        # takes its device (a CPU-only job never does): the emulator's acquisition says so.
    if rank != -1:
        env["ID"] = str(rank)
    return world_size, rank, local_rank


def check_module_group(modules: list[int]) -> None:
    """Refuse the device combinations HCCL does not support, before any collective runs."""
    group = frozenset(modules)
    if len(group) != len(modules):
        raise RuntimeError(
            f"hccl: several processes acquired the same Gaudi module ({sorted(modules)}); "
            "give each local process its own module with HABANA_VISIBLE_MODULES"
        )
    if len(modules) == 1 or selection.is_supported_group(modules):
        return
    raise RuntimeError(
        f"hccl: this job uses modules {','.join(map(str, modules))}, which Gaudi's HCCL does "
        f"not support; supported: {selection.supported_groups_text()}; fix: set "
        "HABANA_VISIBLE_MODULES to a supported group and start one process per module"
    )


def _exchange_modules(store: Any, rank: int, size: int, group_id: str) -> list[int]:
    prefix = f"hpu_plugin_emulator/{group_id}/module/"
    from hpu_emulator import runtime

    store.set(f"{prefix}{rank}", str(runtime.acquired_module()))
    return [int(store.get(f"{prefix}{r}").decode()) for r in range(size)]


#: The gloo groups that stand in for HCCL in this process, shut down at exit.
_groups: weakref.WeakSet[Any] = weakref.WeakSet()


def _shut_down_groups() -> None:
    """Gloo's worker threads may still hold work whose tensors refer to Python objects; when
    they are destroyed during the interpreter's finalization, the process aborts ("terminate
    called without an active exception", pytorch/pytorch#179291), where HCCL exits cleanly.
    At exit the interpreter is still whole, so the groups are shut down then (a group the
    program destroyed already is shut down again, which does nothing)."""
    for group in list(_groups):
        try:
            group.shutdown()
        except Exception:  # at exit there is nobody left to catch it
            pass


atexit.register(_shut_down_groups)

def _create_process_group_hccl(dist_backend_opts: Any, backend_options: Any) -> Any:
    from torch.distributed import ProcessGroupGloo

    rank, size = dist_backend_opts.group_rank, dist_backend_opts.group_size
    world = os.environ.get("WORLD_SIZE", "")
    from hpu_plugin.gaudi.selection import LOCAL_SIZES

    # where the launchers put the processes on this server; none: one server
    local = next((os.environ[name] for name in LOCAL_SIZES if os.environ.get(name)), world)
    if size > 1 and world == local == str(size):  # the whole job, on one server
        modules = _exchange_modules(
            dist_backend_opts.store, rank, size, str(dist_backend_opts.group_id)
        )
        check_module_group(modules)
    group = ProcessGroupGloo(
        dist_backend_opts.store,
        dist_backend_opts.group_rank,
        dist_backend_opts.group_size,
        dist_backend_opts.timeout,
    )
    if hasattr(group, "shutdown"):
        _groups.add(group)
    return group


def _hccl_barrier(original: Callable[..., Any]) -> Callable[..., Any]:
    """``ProcessGroup.barrier`` that hands a group's ``hccl`` barrier to its backend unopened.

    On hardware, the bridge's ``ProcessGroupHCCL::barrier`` ignores its ``BarrierOptions``: it
    waits for the queued collectives, runs a host barrier, then an HCCL barrier on the
    communicators it already has, and never allocates on ``device_ids[0]``. torch >= 2.8's
    generic ``ProcessGroup::barrier`` would first allocate a byte on ``opts.device``, which
    ``barrier(device_ids=[local_rank])`` (Accelerate's ``wait_for_everyone``) makes ``hpu:1``
    in rank 1, and the one-device rule refuses that, as it must. Gloo's barrier has the
    hardware's semantics (waits for the group's pending work, then a host-side barrier, no
    tensor), so the backend's own barrier is called. Groups without an ``hccl`` backend, and a
    barrier asked for on another device type, keep torch's path.
    """
    import torch

    hpu = torch.device("hpu")

    def barrier(self: Any, opts: Any = None) -> Any:
        device = getattr(opts, "device", None)
        if (device is None or device.type == "hpu") and hpu in self._device_types:
            if opts is None:
                from torch.distributed import BarrierOptions

                opts = BarrierOptions()
            return self._get_backend(hpu).barrier(opts)
        return original(self) if opts is None else original(self, opts)

    barrier.__wrapped__ = original  # type: ignore[attr-defined]
    barrier.__doc__ = original.__doc__
    return barrier


def _install_barrier() -> None:
    from torch.distributed import ProcessGroup

    if not hasattr(ProcessGroup.barrier, "__wrapped__"):
        ProcessGroup.barrier = _hccl_barrier(ProcessGroup.barrier)


def register() -> None:
    import torch.distributed as dist

    if not dist.is_available() or "hccl" in dist.Backend.backend_list:
        return
    dist.Backend.register_backend(
        "hccl", _create_process_group_hccl, extended_api=True, devices=["hpu"]
    )
    _install_barrier()
