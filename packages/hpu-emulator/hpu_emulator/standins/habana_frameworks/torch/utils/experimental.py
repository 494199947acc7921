"""Stand-in for ``habana_frameworks.torch.utils.experimental``: which Gaudi this is.

As the real module, it carries ``hpu`` (``habana_frameworks.torch.hpu``: optimum-habana asks
``htexp.hpu.is_available()`` and ``htexp.hpu.device_count()``) and ``htmem`` (its memory API).

Intel Neural Compressor's fp8 code (``neural_compressor.torch.algorithms.fp8_quant``) tells the
bridge, before it patches a model, whether scales are computed at run time
(``_set_is_dynamic_quantization``) and how the static scales were made
(``_set_scale_attributes``: whether all are hardware-aligned powers of two, and the id of the
scaling method). On Gaudi these are hints to the graph compiler, which leave results unchanged;
the emulator keeps them, readable back as the bridge's ``_get_scale_attribute_hash_id`` reads
the id, and does nothing more with them.
"""

import enum

import habana_frameworks.torch.hpu as hpu
import habana_frameworks.torch.hpu.memory as htmem
import torch

from hpu_emulator import runtime

__all__ = [
    "_data_ptr",
    "_get_device_type",
    "_get_is_dynamic_quantization",
    "_get_scale_attribute_hash_id",
    "_is_fp16_supported",
    "_set_is_dynamic_quantization",
    "_set_scale_attributes",
    "hpu",
    "htmem",
    "synDeviceType",
]

_dynamic_quantization = False
_scale_hw_aligned = False
_scale_hash_id = 0


class synDeviceType(enum.IntEnum):
    """Synapse's device types, with its values (``synapse_common_types.h``)."""

    synDeviceGaudi = 2
    synDeviceGaudi2 = 4
    synDeviceGaudi3 = 5


def _get_device_type() -> synDeviceType:
    return {
        "gaudi": synDeviceType.synDeviceGaudi,
        "gaudi2": synDeviceType.synDeviceGaudi2,
        "gaudi3": synDeviceType.synDeviceGaudi3,
    }[runtime.current_config().generation]


def _is_fp16_supported() -> bool:
    """fp16 is not on first-generation Gaudi (DeepSpeed asks here for its dtypes)."""
    return _get_device_type() != synDeviceType.synDeviceGaudi


def _set_is_dynamic_quantization(is_dynamic_quantization: bool) -> None:
    """Whether the fp8 scales of the model about to run are computed at run time (INC's
    ``dynamic_quantization``) rather than read from a measurement."""
    global _dynamic_quantization
    _dynamic_quantization = bool(is_dynamic_quantization)


def _get_is_dynamic_quantization() -> bool:
    return _dynamic_quantization


def _set_scale_attributes(is_hw_aligned: bool, scale_hash_id: int) -> None:
    """``is_hw_aligned``: every scale is a power of two the hardware applies exactly;
    ``scale_hash_id``: which scaling method made the scales."""
    global _scale_hw_aligned, _scale_hash_id
    _scale_hw_aligned = bool(is_hw_aligned)
    _scale_hash_id = int(scale_hash_id)


def _get_scale_attribute_hash_id() -> int:
    return _scale_hash_id


def _data_ptr(t: torch.Tensor) -> int:
    """Where the device holds ``t``'s data: 0 for a tensor without elements, as the bridge's
    (its pointer may be null then). The emulated device's memory is host memory, so this is
    the tensor's own ``data_ptr()``."""
    return t.data_ptr() if t.numel() else 0
