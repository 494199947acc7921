"""Accelerate on two processes: ``Accelerator()`` sees a multi-HPU job on ``hpu`` and
``wait_for_everyone()`` (a barrier on the process's device) returns on both ranks."""

from __future__ import annotations

import sys
from typing import Any

from hpu_plugin.selftest import pair
from hpu_plugin.selftest.harness import acquire, chosen_module, require, run

LIMIT = 240


def worker() -> tuple[str, dict[str, Any]]:
    torch = acquire()
    from accelerate import Accelerator
    from accelerate.utils import DistributedType

    accelerator = Accelerator()
    try:
        require(
            accelerator.distributed_type == DistributedType.MULTI_HPU,
            f"Accelerator().distributed_type is {accelerator.distributed_type}, not MULTI_HPU",
        )
        require(accelerator.device.type == "hpu", f"Accelerator().device is {accelerator.device}")
        require(accelerator.num_processes == 2, f"{accelerator.num_processes} processes, not 2")
        accelerator.wait_for_everyone()
        total = accelerator.reduce(torch.ones(1, device=accelerator.device), reduction="sum")
        require(float(total.cpu()) == 2.0, f"reduce after the barrier gave {total.cpu()}")
        accelerator.wait_for_everyone()
    finally:
        accelerator.end_training()
    return (
        "Accelerator on MULTI_HPU, wait_for_everyone() returned on 2 processes",
        {"module": chosen_module(), "device": str(accelerator.device)},
    )


def body() -> tuple[str, dict[str, Any]]:
    return pair.summary(pair.launch(__spec__.name, LIMIT))


if __name__ == "__main__":
    run("accelerate-barrier", worker if "--worker" in sys.argv else body)
