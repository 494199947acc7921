"""Stand-in for ``habana_frameworks.torch.utils.experimental``: which Gaudi this is.

As the real module, it carries ``hpu`` (``habana_frameworks.torch.hpu``: optimum-habana asks
``htexp.hpu.is_available()`` and ``htexp.hpu.device_count()``) and ``htmem`` (its memory API).
"""

import enum

import habana_frameworks.torch.hpu as hpu
import habana_frameworks.torch.hpu.memory as htmem

from hpu_emulator import runtime

__all__ = ["_get_device_type", "_is_fp16_supported", "hpu", "htmem", "synDeviceType"]


class synDeviceType(enum.IntEnum):
    synDeviceGaudi = 1
    synDeviceGaudi2 = 2
    synDeviceGaudi3 = 3


def _get_device_type() -> synDeviceType:
    return {
        "gaudi": synDeviceType.synDeviceGaudi,
        "gaudi2": synDeviceType.synDeviceGaudi2,
        "gaudi3": synDeviceType.synDeviceGaudi3,
    }[runtime.current_config().generation]


def _is_fp16_supported() -> bool:
    """fp16 is not on first-generation Gaudi (DeepSpeed asks here for its dtypes)."""
    return _get_device_type() != synDeviceType.synDeviceGaudi
