"""DDP backend selector: collectives on Gaudi go through HCCL.

This hook runs when a host is about to initialise a process group, the last moment before
the first collective: the job's device selection is checked here (``hpu_plugin.gaudi.
selection``), because on Gaudi a wrong group hangs or fails inside HCCL instead of saying
what is wrong.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

from hpu_plugin.gaudi import preflight
from hpu_plugin.gaudi.environment import INT64, LAZY_MODE
from hpu_plugin.hookspecs import Refusal, hookimpl
from hpu_plugin.machine import check_this_process

log = logging.getLogger("hpu_plugin")

#: Backends that exist only for other accelerators and cannot run on Gaudi.
FOREIGN = {"nccl": "NVIDIA GPUs", "xccl": "Intel GPUs", "hccl_npu": "Ascend NPUs"}


@hookimpl
def hpu_ddp_backend(requested: str | None) -> str | None:
    if requested in FOREIGN:
        raise Refusal(
            f"backend {requested!r} is for {FOREIGN[requested]} and cannot run on Gaudi (hpu): "
            "use ddp_backend='hccl' (or backend='hccl'), or leave it unset"
            + (" (CUDA code can keep 'nccl' with PT_HPU_GPU_MIGRATION=1 and the "
               "gpu_migration plugin enabled)." if requested == "nccl" else ".")
        )
    if requested not in (None, "hccl"):
        return requested  # the user's own backend (gloo on CPU tensors): HCCL rules do not apply
    placement = check_this_process(os.environ)  # raises GaudiConfigError, a Refusal
    if placement is not None:
        placement.log_warnings(log)
    return "hccl"


@hookimpl
def hpu_job_facts(environ: Mapping[str, str]) -> dict[str, str] | None:
    """Who this rank is, and the settings every rank must share (compared by the host)."""
    placement = check_this_process(environ)
    module = environ.get("HLS_MODULE_ID") or (
        str(placement.module_id) if placement and placement.module_id is not None else ""
    )
    return {
        preflight.RANK: environ.get("RANK", "0"),
        preflight.NODE: socket.gethostname(),
        # the node's rank: GROUP_RANK from torchrun and accelerate launch, CROSS_RANK from
        # DeepSpeed's launcher, NODE_RANK from Ray
        preflight.NODE_RANK: environ.get("GROUP_RANK") or environ.get("CROSS_RANK")
        or environ.get("NODE_RANK") or "0",
        preflight.LOCAL_RANK: environ.get("LOCAL_RANK", "0"),
        preflight.MODULE: module,
        preflight.MODULE_SET: "yes" if environ.get("HLS_MODULE_ID") else "no",
        preflight.PER_PROCESS: "yes" if placement is not None and placement.per_process else "no",
        "device selection": preflight.selection_pattern(environ, placement),
        INT64: environ.get(INT64, "(unset)"),
        LAZY_MODE: environ.get(LAZY_MODE, "(unset)"),
    }
