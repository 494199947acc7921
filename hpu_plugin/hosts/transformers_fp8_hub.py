"""Transformers: the Hub's fine-grained fp8 checkpoints (``quant_method: "fp8"``) on Gaudi.

DeepSeek-V3 and the Qwen3 FP8 releases ship ``float8_e4m3fn`` weights with one float32
``weight_scale_inv`` per ``weight_block_size`` block (128x128). Transformers 5's
``FineGrainedFP8HfQuantizer`` loads them for CUDA and XPU only: with neither, its
``validate_environment`` sets ``dequantize=True`` ("requires a GPU or XPU"), so on an HPU the
model is dequantized to bf16 while loading (twice the weight memory, no fp8 at all); and
``FP8Linear.forward`` calls ``fp8_linear``, which needs DeepGEMM or the Triton kernel of
``kernels-community/finegrained-fp8``, neither of which exists for Gaudi.

Two patches, each recorded in the :class:`Patches` and undone with the adapter:

- ``FineGrainedFP8HfQuantizer.validate_environment``: when the model is placed on an HPU (a
  ``device_map`` naming one, or none given while an HPU is there and no CUDA/XPU, as on a
  CUDA machine the model is then moved with ``.to("hpu")``), the weights stay fp8; first
  generation Gaudi, which has no fp8, is refused before any weight is read, naming
  ``FineGrainedFP8Config(dequantize=True)``. A ``device_map`` on the CPU, ``dequantize``, a
  CUDA or XPU machine: Transformers' own code, unchanged.
- ``integrations.finegrained_fp8.fp8_linear`` (looked up by ``FP8Linear.forward`` and its
  autograd function at each call): an input on an HPU runs as the Gaudi software runs these
  layers (vllm-hpu-extension's ``apply_fp8_linear_hpu`` / ``apply_block_fp8_linear_hpu_dequant``):
  per-tensor or per-output-channel weight scales (one scale block along the input dimension)
  go to the MME's ``torch.ops.hpu.fp8_gemm_v2`` with a dynamic per-tensor activation scale;
  real blocks along the input dimension (128x128) cannot be given to that kernel, so the
  block is dequantized to bf16 on the device and multiplied in bf16. Every other device goes
  to Transformers' own function.

Gaudi 2's E4M3 ends at 240, not 448: a checkpoint's weights above 240 are not representable
there. Before its first fp8 GEMM on Gaudi 2 each weight is requantized once into Gaudi 2's
range through the CPU, halved with its scale doubled (a power of two changes no value), and
static activation scales are doubled alike, as vllm-gaudi loads checkpoints on Gaudi 2.

Transformers 5 and later (``quantizer_finegrained_fp8`` with ``FineGrainedFP8HfQuantizer``
and ``integrations.finegrained_fp8.fp8_linear``); on 4.x it has nothing to do, and where a
5.x release lacks those names it stays out, saying which.
"""

from __future__ import annotations

import functools
import logging
import types
from collections.abc import Mapping
from typing import Any

from hpu_plugin.gaudi.config_error import GaudiConfigError
from hpu_plugin.hosts.replacing import original_of
from hpu_plugin.patching import Patches, ours
from hpu_plugin.registry import Registry
from hpu_plugin.reporting import say_once

HOST = "transformers"
ADAPTER = "fp8 checkpoints"
#: The E4M3 limit of torch's ``float8_e4m3fn`` (OCP), which the Hub's checkpoints use.
OCP_E4M3_MAX = 448.0


def _written_for() -> bool:
    """Transformers 5 or later. On 4.x, a tested release, the adapter has nothing to do (its
    fp8 quantizer is other code, and an fp8 checkpoint gets Transformers' own behaviour):
    a version gate, not an adapter that could not install, so nothing is recorded."""
    from hpu_plugin.hosts import transformers_fp8

    return transformers_fp8.supported()


def _names_hpu(device_map: Any) -> bool:
    """Does an explicit ``device_map`` put any weight on an HPU?"""
    if isinstance(device_map, int) and not isinstance(device_map, bool):
        return True
    if isinstance(device_map, Mapping):
        return any(_names_hpu(where) for where in device_map.values() if where is not None)
    text = str(getattr(device_map, "type", device_map))
    return text in ("auto", "balanced", "balanced_low_0", "sequential", "hpu") or (
        text.startswith("hpu:"))


def _generation() -> Any:
    import torch

    from hpu_plugin.gaudi.generations import generation_from_name

    return generation_from_name(torch.hpu.get_device_name())


def refuse_first_generation() -> None:
    """Gaudi 1 has no fp8: refuse before loading, naming the bf16 load as the fix."""
    generation = _generation()
    if generation is None or generation.fp8:
        return
    raise GaudiConfigError(
        "quantization_config (fp8)", "float8_e4m3fn weights",
        f"bf16 and fp32 on {generation.name}; fp8 on GAUDI2 and GAUDI3",
        "load it dequantized to bf16: from transformers import FineGrainedFP8Config; "
        "from_pretrained(path, quantization_config=FineGrainedFP8Config(dequantize=True))",
        problem="this checkpoint's fp8 weights cannot run on first-generation Gaudi",
    )


def install_validate(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    """Keep the weights fp8 for an HPU (``quantizer_finegrained_fp8``)."""
    if not _written_for():
        return
    owner = getattr(module, "FineGrainedFP8HfQuantizer", None)
    original = original_of(owner, "validate_environment", HOST, ADAPTER,
                           "FineGrainedFP8HfQuantizer.validate_environment", own=True)
    if original is None:
        return

    @functools.wraps(original)
    def validate_environment(self: Any, *args: Any, **kwargs: Any) -> None:
        import torch
        from transformers.utils import is_accelerate_available, is_torch_xpu_available

        config = self.quantization_config
        device_map = kwargs.get("device_map")
        if (config.dequantize or torch.cuda.is_available() or is_torch_xpu_available()
                or not registry.device_available()
                or not (device_map is None or _names_hpu(device_map))):
            return original(self, *args, **kwargs)
        refuse_first_generation()
        if device_map is None and not self.pre_quantized:
            # Transformers would say "No GPU or XPU found": name the Gaudi's way instead
            raise ValueError(
                "FineGrainedFP8Config quantizes the weights as they load, on the device they "
                "load to, and with no device_map they load on the CPU. Fix: pass "
                "device_map='hpu'")
        formats = {"scale_fmt": (getattr(config, "scale_fmt", "float"), "float"),
                   "expert_dtype": (getattr(config, "expert_dtype", "fp8"), "fp8")}
        for name, (value, supported) in formats.items():
            if value != supported:  # ue8m0 scales, FP4 experts: no kernel on the HPU
                raise NotImplementedError(
                    f"FineGrainedFP8Config {name}={value!r} is not supported on the HPU (only "
                    f"{supported!r} is); load with FineGrainedFP8Config(dequantize=True)")
        if not is_accelerate_available():
            raise ImportError("Loading an FP8 quantized model requires accelerate "
                              "(`pip install accelerate`)")
        say_once("fp8-hub-hpu", logging.INFO,
                 "hpu_plugin: fp8 checkpoint: weights stay float8_e4m3fn for the HPU "
                 "(fp8_gemm_v2 for per-channel scales, block dequantization to bf16 on the "
                 "device for 2-D blocks).")

    patches.set(owner, "validate_environment", ours(validate_environment))


def range_factor() -> float:
    """The power of two that brings the checkpoints' E4M3 range (448) into this Gaudi's: 2 on
    Gaudi 2 (448 / 2 = 224 <= 240), 1 on Gaudi 3. A power of two moves only the exponent, so
    requantized weights keep their values (vllm-gaudi's Gaudi 2 loading does the same)."""
    limit = _generation().e4m3_max
    factor = 1.0
    while OCP_E4M3_MAX / factor > limit:
        factor *= 2.0
    return factor


def _gaudi2_range(weight: Any, scale: Any) -> None:
    """Requantize ``weight`` into this Gaudi's E4M3 range once, through the CPU: the weight
    divided and its scale multiplied by :func:`range_factor`.

    Done to the tensors the layer owns: ``FP8Experts`` passes each call a fresh slice of its
    parameters (``gate_up_proj[expert]``), so a mark on the slice would be lost and every
    call would halve the stored weights again. The whole parameter is moved at its first
    use, one slice of its first dimension at a time (the CPU copy stays one expert's size)."""
    import torch

    owner = weight if weight._base is None else weight._base
    if getattr(owner, "_hpu_plugin_e4m3_max", None) is not None:
        return
    factor = range_factor()
    if factor != 1.0:
        with torch.no_grad():
            parts = owner.data.unbind(0) if owner.dim() > weight.dim() else (owner.data,)
            for part in parts:
                part.copy_((part.cpu().float() / factor).to(part.dtype))
            (scale if scale._base is None else scale._base).data.mul_(factor)
    owner._hpu_plugin_e4m3_max = _generation().e4m3_max


def dequantize_blocks(weight: Any, scale: Any, block_size: Any, dtype: Any) -> Any:
    """``weight`` times the scale of its block, in ``dtype`` on its device."""
    rows, cols = weight.shape
    scale = scale.to(dtype)
    scale = scale.repeat_interleave(block_size[0], 0)[:rows]
    scale = scale.repeat_interleave(block_size[1], 1)[:, :cols]
    return weight.to(dtype) * scale


def hpu_fp8_linear(input: Any, weight: Any, weight_scale_inv: Any,
                   block_size: Any = None, bias: Any = None,
                   activation_scale: Any = None) -> Any:
    """``fp8_linear`` on an HPU: ``fp8_gemm_v2`` where the scales fit it, else bf16."""
    import torch

    if weight.dtype != torch.float8_e4m3fn or weight_scale_inv.dtype != torch.float32:
        raise NotImplementedError(
            f"fp8 linear on HPU: {weight.dtype} weights with {weight_scale_inv.dtype} scales "
            "are not supported (float8_e4m3fn weights with float32 scales are); load with "
            "FineGrainedFP8Config(dequantize=True)")
    _gaudi2_range(weight, weight_scale_inv)
    rows, cols = weight.shape
    per_channel = block_size is None or weight_scale_inv.numel() == 1 or (
        weight_scale_inv.dim() == 2 and weight_scale_inv.shape[1] == 1)
    if not per_channel:
        dense = dequantize_blocks(weight, weight_scale_inv, block_size, input.dtype)
        return torch.nn.functional.linear(input, dense, bias)
    if weight_scale_inv.numel() == 1:
        w_scale = weight_scale_inv.reshape(())
    else:
        w_scale = weight_scale_inv[:, 0].repeat_interleave(block_size[0])[:rows]
    # Gaudi's fp8 casts take float32 and bf16 (the bridge's fp8_ops refuse fp16): an fp16
    # model's activations are cast through bf16, and its output returned in fp16
    work = torch.bfloat16 if input.dtype == torch.float16 else input.dtype
    flat = input.reshape(-1, cols).to(work)
    if activation_scale is not None:  # a static scale, made for 448: widened as the weights
        x_scale = activation_scale.float().reshape(()) * range_factor()
    else:
        x_scale = (flat.abs().amax().float() / _generation().e4m3_max).clamp(min=1e-12)
    x_fp8, _ = torch.ops.hpu.cast_to_fp8_v2(flat, 1.0 / x_scale, False, False,
                                            torch.float8_e4m3fn)
    out = torch.ops.hpu.fp8_gemm_v2(x_fp8, False, weight, True, None, work, x_scale,
                                    w_scale, None, False).to(input.dtype)
    if bias is not None:
        out = out + bias
    return out.reshape(*input.shape[:-1], rows)


def install_linear(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    """``fp8_linear`` runs on an HPU (``integrations.finegrained_fp8``)."""
    if not _written_for():
        return
    original = original_of(module, "fp8_linear", HOST, ADAPTER,
                           "integrations.finegrained_fp8.fp8_linear")
    if original is None:
        return

    @functools.wraps(original)
    def fp8_linear(input: Any, weight: Any, weight_scale_inv: Any, block_size: Any = None,
                   bias: Any = None, activation_scale: Any = None,
                   allow_deepgemm: bool = True) -> Any:
        if input.device.type != "hpu":
            return original(input, weight, weight_scale_inv, block_size, bias,
                            activation_scale, allow_deepgemm)
        return hpu_fp8_linear(input, weight, weight_scale_inv, block_size, bias,
                              activation_scale)

    patches.set(module, "fp8_linear", ours(fp8_linear))
