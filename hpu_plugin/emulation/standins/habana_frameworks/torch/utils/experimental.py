"""Stand-in for ``habana_frameworks.torch.utils.experimental``: which Gaudi this is."""

import enum

from hpu_plugin.emulation import runtime


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
