"""DDP backend selector: collectives on Gaudi go through HCCL."""

from __future__ import annotations

from hpu_plugin.hookspecs import Refusal, hookimpl

#: Backends that exist only for other accelerators and cannot run on Gaudi.
FOREIGN = {"nccl": "NVIDIA GPUs", "xccl": "Intel GPUs", "hccl_npu": "Ascend NPUs"}


@hookimpl
def hpu_ddp_backend(device_type: str, requested: str | None) -> str | None:
    if device_type != "hpu":
        return None
    if requested is None:
        return "hccl"
    if requested in FOREIGN:
        raise Refusal(
            f"backend {requested!r} is for {FOREIGN[requested]} and cannot run on Gaudi (hpu): "
            "use ddp_backend='hccl' (or backend='hccl'), or leave it unset."
        )
    return requested
