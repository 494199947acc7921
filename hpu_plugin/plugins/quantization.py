"""Quantization placement: a quantized model with no ``device_map`` goes to the current HPU."""

from __future__ import annotations

from hpu_plugin.hookspecs import DeviceMap, hookimpl


@hookimpl
def hpu_quantization_device_map(
    method: str, bits: int, device_map: DeviceMap | None, device_type: str
) -> DeviceMap | None:
    if device_type != "hpu" or method != "bitsandbytes" or device_map is not None:
        return None
    import torch

    return {"": f"hpu:{torch.hpu.current_device()}"}
