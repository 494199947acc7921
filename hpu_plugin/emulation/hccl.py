"""The ``hccl`` collective backend of the emulator: Gloo under an HPU-only registration.

Registered for device type ``hpu`` only, so a collective on CPU tensors finds no backend and
fails, as on real HCCL; HPU tensors reach Gloo through the C++ fallback's shadow group.
"""

from __future__ import annotations

import os
from typing import Any


def initialize_distributed_hpu() -> tuple[int, int, int]:
    """The import-time environment effects of the real ``hccl`` module."""
    env = os.environ
    for source, target in (
        ("OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK"),
        ("OMPI_COMM_WORLD_SIZE", "WORLD_SIZE"),
        ("OMPI_COMM_WORLD_RANK", "RANK"),
    ):
        if source in env:
            env[target] = env[source]
    if not all(name in env for name in ("LOCAL_RANK", "WORLD_SIZE", "RANK")):
        env.setdefault("MASTER_ADDR", "localhost")
        env.setdefault("MASTER_PORT", "12345")
    world_size = int(env.get("WORLD_SIZE", "1"))
    rank = int(env.get("RANK", "-1"))
    local_rank = int(env.get("LOCAL_RANK", "-1"))
    if world_size > 1 and local_rank != -1:
        visible = env.get("HABANA_VISIBLE_MODULES", "").strip()
        env["HLS_MODULE_ID"] = visible.split(",")[local_rank].strip() if visible else str(
            local_rank
        )
    env["ID"] = str(rank)
    return world_size, rank, local_rank


def _create_process_group_hccl(dist_backend_opts: Any, backend_options: Any) -> Any:
    from torch.distributed import ProcessGroupGloo

    return ProcessGroupGloo(
        dist_backend_opts.store,
        dist_backend_opts.group_rank,
        dist_backend_opts.group_size,
        dist_backend_opts.timeout,
    )


def register() -> None:
    import torch.distributed as dist

    if not dist.is_available() or "hccl" in dist.Backend.backend_list:
        return
    dist.Backend.register_backend(
        "hccl", _create_process_group_hccl, extended_api=True, devices=["hpu"]
    )
