"""Quantization placement: a quantized model with no ``device_map`` goes to the current HPU.

It also refuses, before any weight is loaded, what bitsandbytes cannot run on Gaudi, so that
the user gets a message naming the setting and its fix instead of a failure deep inside the
first forward pass. The rules (first-generation Gaudi, bit widths, NF4 only, fp16 compute)
are facts of ``hpu_plugin.gaudi.generations``, shared with ``hpu-plugin doctor``; this
module adds the one the facts module does not check yet, 4-bit storage. Sources, from the
pinned bitsandbytes 0.50.2:

- ``backends/hpu/ops.py`` registers one HPU kernel, ``bitsandbytes::dequantize_4bit``; it
  raises for any ``quant_type`` other than ``"nf4"`` and for storage other than uint8 or
  bfloat16. ``tests/helpers.py:is_supported_on_hpu`` also excludes fp4 and float16.
- 8-bit (LLM.int8): the README's accelerator table marks it supported on Gaudi2/3 and its
  test suite runs ``Linear8bitLt`` on ``hpu`` (``tests/test_linear8bitlt.py``) through the
  pure-PyTorch kernels, so 8-bit is placed, not refused.

Gaudi fp8 (``"gaudi_fp8"``: Intel Neural Compressor's measure-then-quantize flow, which the
Transformers adapter runs after the weights load) is placed the same way, and refused on
first-generation Gaudi, which has no fp8 (``generations``: ``GAUDI.fp8`` is false).
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Mapping
from typing import Any

from hpu_plugin.gaudi.config_error import GaudiConfigError
from hpu_plugin.gaudi.generations import bitsandbytes_findings, generation_from_name
from hpu_plugin.hookspecs import DeviceMap, hookimpl
from hpu_plugin.reporting import say_once

log = logging.getLogger("hpu_plugin")

METHOD = "bitsandbytes"
#: Neural Compressor's fp8 on Gaudi, as the Transformers adapter names it.
FP8_METHOD = "gaudi_fp8"
#: The methods this plugin places on the current HPU when no ``device_map`` is given.
PLACED = (METHOD, FP8_METHOD)
#: 4-bit storage dtypes bitsandbytes' HPU kernel reads (``backends/hpu/ops.py``).
HPU_4BIT_QUANT_STORAGE = ("uint8", "bfloat16")
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


def check(bits: int, device_name: str, options: Mapping[str, Any] | None = None) -> None:
    """Raise a Refusal (:class:`GaudiConfigError`) for what bitsandbytes cannot run here.

    ``device_name`` is ``torch.hpu.get_device_name()``. ``options`` are the quantization
    settings the host passes (``quant_type``, ``quant_storage``, ``compute_dtype``; dtypes
    as ``torch.dtype`` or their names); missing ones are not checked. Warnings of the
    facts module are logged once each.
    """
    options = options or {}
    compute = options.get("compute_dtype")
    findings = bitsandbytes_findings(
        generation_from_name(device_name),
        bits,
        quant_type=str(options.get("quant_type") or "nf4"),
        compute_dtype=None if compute is None else _dtype_name(compute),
    )
    storage = options.get("quant_storage")
    if bits == 4 and storage is not None and _dtype_name(storage) not in HPU_4BIT_QUANT_STORAGE:
        raise GaudiConfigError(
            "bnb_4bit_quant_storage",
            f"torch.{_dtype_name(storage)}",
            "torch.uint8 or torch.bfloat16 (what bitsandbytes' HPU kernel reads)",
            "leave bnb_4bit_quant_storage unset (torch.uint8) or pass torch.bfloat16",
        )
    for finding in findings:
        if finding.severity in ("warning", "error"):
            say_once(("bitsandbytes", finding.message), logging.WARNING, "hpu_plugin: %s; %s",
                     finding.message, finding.fix)


def place(method: str, device_map: DeviceMap | None, current: int) -> DeviceMap | None:
    """Where a quantized model with no ``device_map`` goes: the current HPU."""
    if method not in PLACED or device_map is not None:
        return None  # another method, or the user's device_map, which is theirs
    return {"": f"hpu:{current}"}


def refuse_what_hpu_cannot_run(
    method: str,
    bits: int,
    placed: DeviceMap | None,
    device_name: str,
    options: Mapping[str, Any] | None = None,
) -> None:
    """Raise a Refusal when the final placement puts on an HPU what cannot run there."""
    if not places_on_hpu(placed):
        return
    if method == METHOD:
        check(bits, device_name, options)
    elif method == FP8_METHOD:
        check_fp8(device_name)


def check_fp8(device_name: str) -> None:
    """fp8 needs Gaudi2 or later; refused here, before any weight is read, rather than in
    Neural Compressor's first fp8 cast. An unknown device name is not refused."""
    generation = generation_from_name(device_name)
    if generation is None or generation.supports("fp8"):
        return
    raise GaudiConfigError(
        f"quantization_config ({FP8_METHOD})", "fp8",
        f"bf16 and fp32 on {generation.name}; fp8 on GAUDI2 and GAUDI3",
        "load the model in bf16: pass no quantization_config and unset HPU_PLUGIN_FP8",
        problem="fp8 is not available on first-generation Gaudi",
    )


def decide(
    method: str,
    bits: int,
    device_map: DeviceMap | None,
    device_name: str,
    current: int,
    options: Mapping[str, Any] | None = None,
) -> DeviceMap | None:
    """What the hooks below decide when no other plugin answers, with the device facts
    passed in: refuse, place, or no opinion."""
    placed = place(method, device_map, current)
    refuse_what_hpu_cannot_run(
        method, bits, device_map if placed is None else placed, device_name, options
    )
    return placed


@hookimpl
def hpu_quantization_device_map(
    method: str, device_map: DeviceMap | None
) -> DeviceMap | None:
    if method not in PLACED:
        return None
    import torch

    return place(method, device_map, torch.hpu.current_device())


@hookimpl(wrapper=True, specname="hpu_quantization_device_map")
def refuse_unrunnable_placement(
    method: str,
    bits: int,
    device_map: DeviceMap | None,
    options: Mapping[str, Any],
) -> Generator[None, DeviceMap | None, DeviceMap | None]:
    """Checks the final answer, whichever plugin gave it: a third party's placement
    (``tryfirst``) must not bypass what Gaudi cannot run."""
    placed = yield
    import torch

    refuse_what_hpu_cannot_run(
        method, bits, device_map if placed is None else placed,
        torch.hpu.get_device_name(), options,
    )
    return placed
