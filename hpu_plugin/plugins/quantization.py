"""Quantization placement: a quantized model with no ``device_map`` goes to the current HPU.

It also refuses, before any weight is loaded, what bitsandbytes cannot run on Gaudi, so that
the user gets a message naming the setting and its fix instead of a failure deep inside the
first forward pass. What Gaudi supports, from the pinned bitsandbytes (0.50.2) sources:

- Generations: the README's accelerator table lists Intel Gaudi (``hpu``) with hardware
  requirement "Gaudi2, Gaudi3"; first-generation Gaudi is not supported.
- 4-bit: ``backends/hpu/ops.py`` registers one HPU kernel, ``bitsandbytes::dequantize_4bit``,
  which raises for any ``quant_type`` other than ``"nf4"`` and for storage other than
  uint8 or bfloat16; ``tests/helpers.py:is_supported_on_hpu`` also excludes a float16
  compute dtype (and fp4). Everything else runs on bitsandbytes' pure-PyTorch kernels.
- 8-bit (LLM.int8): the README marks it supported on Gaudi2/3 (✅), and the test suite runs
  ``Linear8bitLt`` on ``hpu`` (``tests/test_linear8bitlt.py``, with ``hpu_backend`` for
  ``torch.compile``) through the pure-PyTorch kernels. It is therefore placed like 4-bit,
  not refused. (The "we support only NF4 inference on Gaudi" remark in vllm-project/vllm
  #20172 is about vLLM's Gaudi loader, not bitsandbytes.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hpu_plugin.hookspecs import DeviceMap, Refusal, hookimpl

METHOD = "bitsandbytes"
#: ``torch.hpu.get_device_name()`` of first-generation Gaudi, which bitsandbytes does not
#: support (README accelerator table: "Gaudi2, Gaudi3").
FIRST_GENERATION = "GAUDI"
SUPPORTED_BITS = (4, 8)
#: 4-bit settings bitsandbytes runs on HPU (backends/hpu/ops.py, tests/helpers.py).
HPU_4BIT_QUANT_TYPES = ("nf4",)
HPU_4BIT_QUANT_STORAGE = ("uint8", "bfloat16")
HPU_4BIT_UNSUPPORTED_COMPUTE_DTYPES = ("float16",)
#: ``device_map`` strings with which Accelerate spreads the model over the accelerators.
_SPREADING_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


def _dtype_name(value: object) -> str:
    """``torch.bfloat16``, ``"torch.bfloat16"`` and ``"bfloat16"`` all become ``"bfloat16"``."""
    return str(value).removeprefix("torch.")


def _is_hpu(device: object) -> bool:
    if isinstance(device, bool):
        return False
    if isinstance(device, int):  # an accelerator index: on a Gaudi host, an HPU
        return True
    text = str(getattr(device, "type", device))
    return text == "hpu" or text.startswith("hpu:")


def places_on_hpu(device_map: DeviceMap | None) -> bool:
    """Would loading with ``device_map`` put any weight on an HPU?"""
    if device_map is None:
        return True  # this plugin places it on the current HPU
    if isinstance(device_map, str) and device_map in _SPREADING_MAPS:
        return True
    if isinstance(device_map, Mapping):
        return any(_is_hpu(device) for device in device_map.values())
    return _is_hpu(device_map)


def refusal(
    bits: int, generation: str, options: Mapping[str, Any] | None = None
) -> str | None:
    """Why bitsandbytes at ``bits`` cannot run on this Gaudi with ``options``, or ``None``.

    ``generation`` is ``torch.hpu.get_device_name()``. ``options`` are the quantization
    settings the host passes (keys ``quant_type``, ``quant_storage``, ``compute_dtype``;
    dtypes as ``torch.dtype`` or their names); missing keys are not checked.
    """
    config = "BitsAndBytesConfig(load_in_4bit=True)" if bits == 4 else (
        "BitsAndBytesConfig(load_in_8bit=True)"
    )
    if bits not in SUPPORTED_BITS:
        return (
            f"bitsandbytes quantization to bits={bits} is not supported on Gaudi: use "
            "BitsAndBytesConfig(load_in_4bit=True) or load_in_8bit=True."
        )
    if generation == FIRST_GENERATION:
        return (
            f"{config} cannot run on first-generation Gaudi (torch.hpu.get_device_name() "
            f"returned {generation!r}): bitsandbytes supports Gaudi2 and Gaudi3 only. Fix: "
            "run on Gaudi2 or Gaudi3, load the model unquantized in bfloat16 "
            "(torch_dtype=torch.bfloat16), or quantize on the CPU with device_map='cpu'."
        )
    if bits != 4 or not options:
        return None
    quant_type = options.get("quant_type")
    if quant_type is not None and quant_type not in HPU_4BIT_QUANT_TYPES:
        return (
            f"BitsAndBytesConfig(bnb_4bit_quant_type={quant_type!r}) cannot run on Gaudi: "
            "bitsandbytes' HPU backend dequantizes NF4 only. Fix: pass "
            "bnb_4bit_quant_type='nf4'."
        )
    storage = options.get("quant_storage")
    if storage is not None and _dtype_name(storage) not in HPU_4BIT_QUANT_STORAGE:
        return (
            f"BitsAndBytesConfig(bnb_4bit_quant_storage=torch.{_dtype_name(storage)}) cannot "
            "run on Gaudi: bitsandbytes' HPU backend reads 4-bit weights stored as uint8 or "
            "bfloat16 only. Fix: leave bnb_4bit_quant_storage unset (torch.uint8) or pass "
            "torch.bfloat16."
        )
    compute = options.get("compute_dtype")
    if compute is not None and _dtype_name(compute) in HPU_4BIT_UNSUPPORTED_COMPUTE_DTYPES:
        return (
            f"BitsAndBytesConfig(bnb_4bit_compute_dtype=torch.{_dtype_name(compute)}) is not "
            "supported by bitsandbytes on Gaudi. Fix: pass "
            "bnb_4bit_compute_dtype=torch.bfloat16 (every Gaudi generation computes in bf16)."
        )
    return None


def decide(
    method: str,
    bits: int,
    device_map: DeviceMap | None,
    generation: str,
    current: int,
    options: Mapping[str, Any] | None = None,
) -> DeviceMap | None:
    """The hook's decision with the device facts passed in: refuse, place, or no opinion."""
    if method != METHOD:
        return None
    if places_on_hpu(device_map):
        reason = refusal(bits, generation, options)
        if reason is not None:
            raise Refusal(reason)
    if device_map is not None:
        return None  # the user's device_map is theirs
    return {"": f"hpu:{current}"}


@hookimpl
def hpu_quantization_device_map(
    method: str, bits: int, device_map: DeviceMap | None, device_type: str
) -> DeviceMap | None:
    if device_type != "hpu" or method != METHOD:
        return None
    import torch

    return decide(
        method, bits, device_map, torch.hpu.get_device_name(), torch.hpu.current_device()
    )
