"""A two-process ``hccl`` job on two free Gaudi modules: ``init_process_group()`` with no
backend chooses ``hccl``, and all_reduce, all_gather, broadcast and barrier give the right
values on ``hpu`` tensors."""

from __future__ import annotations

import sys
from typing import Any

from hpu_plugin.selftest import pair
from hpu_plugin.selftest.harness import acquire, chosen_module, require, run

LIMIT = 240  # seconds for the two workers, inside the check's own limit


def worker() -> tuple[str, dict[str, Any]]:
    torch = acquire()
    import torch.distributed as dist

    dist.init_process_group()
    try:
        backend = dist.get_backend()
        require(backend == "hccl", f"init_process_group() chose {backend!r}, not 'hccl'")
        rank, world = dist.get_rank(), dist.get_world_size()
        summed = torch.full((4,), float(rank + 1), device="hpu")
        dist.all_reduce(summed)
        expected = float(sum(range(1, world + 1)))
        require(bool((summed.cpu() == expected).all()), f"all_reduce gave {summed.cpu()}")
        gathered = [torch.zeros(2, device="hpu") for _ in range(world)]
        dist.all_gather(gathered, torch.full((2,), float(rank), device="hpu"))
        values = [float(t[0].cpu()) for t in gathered]
        require(values == [float(r) for r in range(world)], f"all_gather gave {values}")
        sent = torch.arange(3.0, device="hpu") if rank == 0 else torch.zeros(3, device="hpu")
        dist.broadcast(sent, src=0)
        require(sent.cpu().tolist() == [0.0, 1.0, 2.0], f"broadcast gave {sent.cpu()}")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return (
        f"{world} processes on hccl: all_reduce, all_gather, broadcast, barrier",
        {"module": chosen_module(), "backend": backend},
    )


def body() -> tuple[str, dict[str, Any]]:
    return pair.summary(pair.launch(__spec__.name, LIMIT))


if __name__ == "__main__":
    run("hccl", worker if "--worker" in sys.argv else body)
