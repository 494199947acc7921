"""Transformers: availability, TrainingArguments' compile backend, pipeline device, bnb placement,
the experts implementation of mixture-of-experts models, Gaudi fp8 (``transformers_fp8``).

From 4.51 on, Transformers has HPU branches behind ``is_torch_hpu_available``; making that
one function answer from the registry routes the device of ``TrainingArguments``, seeding,
RNG checkpoints and memory metrics. The points where Transformers decides something the
hooks own (compile backend, default pipeline device index, quantized placement) are
wrapped on their classes, so subclasses inherit the routing.
"""

from __future__ import annotations

import functools
import inspect
import logging
import numbers
import sys
import types
from collections.abc import Callable
from typing import Any

from hpu_plugin import importhook
from hpu_plugin.hosts import (
    transformers_fp8,
    transformers_fp8_hub,
    transformers_gaudi_ops,
    transformers_set_losses,
)
from hpu_plugin.hosts.env_section import gaudi_section
from hpu_plugin.hosts.replacing import (
    cached_like,
    host_version,
    original_of,
    replace_everywhere,
    stay_out,
)
from hpu_plugin.hosts.support import HPU_CODE_SINCE, release_key
from hpu_plugin.patching import Patches, is_ours, ours
from hpu_plugin.registry import Registry
from hpu_plugin.reporting import say_once

log = logging.getLogger("hpu_plugin")

HOST = "transformers"
#: Transformers turns HPU off below this Accelerate release: the first with HPU code.
MIN_ACCELERATE = HPU_CODE_SINCE["accelerate"]


def accelerate_allows_hpu(accelerate_version: str | None) -> bool:
    """No Accelerate, or Accelerate >= 1.5.0. Logs the fix once when it says no."""
    if accelerate_version is None or accelerate_version == "?":
        return True
    key, since = release_key(accelerate_version), release_key(MIN_ACCELERATE)
    if key is not None and since is not None and key[0] >= since[0]:  # 1.5.0rc1 has HPU code
        return True
    say_once(
        "accelerate-too-old", logging.WARNING,
        "hpu_plugin: Transformers reports no HPU because Accelerate %s is older than 1.5.0, "
        "the first release that supports Gaudi: pip install 'accelerate>=1.5.0'.",
        accelerate_version,
    )
    return False


def _installed_accelerate() -> str | None:
    version = host_version("accelerate")
    return None if version == "?" else version


def _keep_gaudi_workarounds(patches: Patches, release: tuple[int, ...]) -> None:
    try:
        transformers_gaudi_ops.install(patches, release)
    except Exception as exc:  # a kernel registration must never break the answer
        say_once("gaudi-ops", logging.WARNING,
                 "hpu_plugin: Transformers' Gaudi workarounds could not be installed (%s: %s); "
                 "int64 gather, self-aliasing scatter and cholesky may fail on Gaudi.",
                 type(exc).__name__, exc)


def keep_gaudi_workarounds(patches: Patches) -> None:
    """From activation, on Gaudi: the workarounds in place before anything reaches ``hpu``.

    Transformers makes them in ``is_torch_hpu_available()``, but a library can find Gaudi
    without asking it (sentence-transformers 6.2 asks ``habana_frameworks`` directly), and
    its BERT encode then fails with "Graph compile failed with synStatus 26" on the int64
    gather. They are HPU kernels, free for CPU ops, so they are registered whoever asks
    first; which ones follows the installed Transformers (read from its metadata, not
    imported), the newest set without it: Gaudi's limits do not depend on Transformers.
    """
    version = host_version(HOST)
    key = release_key(version) if version != "?" else None
    _keep_gaudi_workarounds(patches, key[0] if key is not None else (sys.maxsize,))


def make_is_torch_hpu_available(
    registry: Registry, original: Callable[..., Any], patches: Patches | None = None
) -> Callable[..., bool]:
    """The registry's answer (no while the installed Accelerate is older than 1.5.0, as in
    Transformers' own check), with the host's cache API and compile marker.

    The original is not called: besides answering, it patches ``torch.gather``,
    ``torch.scatter`` and ``torch.compile`` with Python wrappers, which would put a
    Python frame on every CPU gather and pre-empt the compile hooks. Its Gaudi workarounds
    are installed instead as HPU kernels, when it would have installed them: on a True
    answer (``transformers_gaudi_ops``; the compile hooks own ``torch.compile``).
    """
    key = release_key(host_version(HOST))
    release = key[0] if key is not None else ()

    def is_torch_hpu_available() -> bool:
        answer = registry.device_available() and accelerate_allows_hpu(_installed_accelerate())
        if answer and patches is not None:
            _keep_gaudi_workarounds(patches, release)
        return answer

    return cached_like(original, is_torch_hpu_available)


def install_availability(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    original = original_of(
        module, "is_torch_hpu_available", HOST, "availability",
        "is_torch_hpu_available (HPU support starts at 4.51)",
    )
    if original is None:
        return
    replace_everywhere(
        patches, original, make_is_torch_hpu_available(registry, original, patches))


def install_training_args(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    """``torch_compile=True`` takes its backend from the compile hooks on Gaudi."""
    cls = getattr(module, "TrainingArguments", None)
    original = original_of(
        cls, "__post_init__", HOST, "TrainingArguments", "TrainingArguments.torch_compile_backend",
        found=hasattr(cls, "torch_compile_backend"),
    )
    if original is None:
        return

    @functools.wraps(original)
    def __post_init__(self: Any) -> None:
        wants_compile = self.torch_compile or self.torch_compile_mode is not None
        if wants_compile and self.torch_compile_backend is None and not self.use_cpu:
            from transformers.utils import import_utils

            if import_utils.is_torch_hpu_available():
                chosen = registry.compile_backend(None)
                if isinstance(chosen, str):
                    self.torch_compile_backend = chosen
        original(self)

    patches.set(cls, "__post_init__", ours(__post_init__))


def install_pipeline(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    """With no ``device``, a pipeline runs on the device this process uses; a device the
    Gaudi software would refuse is refused before the model is moved."""
    cls = getattr(module, "Pipeline", None)
    original = original_of(
        cls, "__init__", HOST, "pipeline", "pipelines.base.Pipeline.__init__", own=True
    )
    if original is None:
        return

    parameters = list(inspect.signature(original).parameters)
    if "device" not in parameters:
        stay_out(HOST, "pipeline", "device parameter in Pipeline.__init__")
        return
    device_position = parameters.index("device") - 1  # without self

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        device = kwargs.get("device", args[device_position] if len(args) > device_position
                            else None)
        if device is not None and registry.device_available():
            refuse_other_device("device", device)
        if kwargs.get("device") is None and len(args) <= device_position:
            model = kwargs.get("model", args[0] if args else None)
            if getattr(model, "hf_device_map", None) is None:
                properties = registry.device_properties()
                if properties is not None:
                    kwargs["device"] = properties.current
        original(self, *args, **kwargs)

    patches.set(cls, "__init__", ours(__init__))


#: BitsAndBytesConfig attribute -> option name of hpu_quantization_device_map.
BNB_4BIT_OPTIONS = {
    "bnb_4bit_quant_type": "quant_type",
    "bnb_4bit_quant_storage": "quant_storage",
    "bnb_4bit_compute_dtype": "compute_dtype",
}


def bnb_options(config: Any, bits: int) -> dict[str, Any]:
    """The 4-bit settings that decide whether the device can run the model."""
    if bits != 4 or config is None:
        return {}
    return {
        option: getattr(config, attribute)
        for attribute, option in BNB_4BIT_OPTIONS.items()
        if getattr(config, attribute, None) is not None
    }


def install_bnb(registry: Registry, patches: Patches, module: types.ModuleType, bits: int) -> None:
    """With bitsandbytes and no ``device_map``, the model is placed where the hooks say."""
    cls = getattr(module, f"Bnb{bits}BitHfQuantizer", None)
    original = original_of(
        cls, "update_device_map", HOST, f"bitsandbytes {bits}-bit",
        f"Bnb{bits}BitHfQuantizer.update_device_map", own=True,
    )
    if original is None:
        return

    @functools.wraps(original)
    def update_device_map(self: Any, device_map: Any) -> Any:
        if registry.device_available():
            chosen = registry.quantization_device_map(
                "bitsandbytes", bits, device_map,
                options=bnb_options(getattr(self, "quantization_config", None), bits),
            )
            if device_map is None and chosen is not None:
                say_once(
                    f"bnb-device-map-{bits}", logging.INFO,
                    "hpu_plugin: bitsandbytes %d-bit: no device_map given; placing the model "
                    "with device_map=%r.", bits, chosen,
                )
                return chosen
        return original(self, device_map)

    patches.set(cls, "update_device_map", ours(update_device_map))


#: What Transformers (5.x) gives a mixture-of-experts model that names no experts implementation.
DEFAULT_EXPERTS = "grouped_mm"
#: What the adapter gives it instead on Gaudi: one gather of each token's expert weights and
#: one ``bmm``, shapes fixed by the token count (graphs and lazy mode need no new recipe per
#: routing), on ops the bridge has HPU kernels for.
GAUDI_EXPERTS = "batched_mm"


def fp8_experts(config: Any) -> bool:
    """Does Transformers' fine-grained fp8 quantizer replace this model's experts with its
    ``FP8Experts``? Those look their implementation up in an interface of their own, whose
    ``batched_mm`` and ``grouped_mm`` are CUDA (Triton) kernels; only ``eager`` runs them
    elsewhere, through ``fp8_linear``. ``dequantize=True`` keeps the model's own experts."""
    quantization = getattr(config, "quantization_config", None)
    if quantization is None:
        return False
    read = quantization.get if isinstance(quantization, dict) else functools.partial(
        getattr, quantization)
    return read("quant_method", None) == "fp8" and not read("dequantize", False)


def install_experts(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    """A mixture-of-experts model that names no ``experts_implementation`` gets
    ``batched_mm`` on Gaudi instead of Transformers' default ``grouped_mm``.

    ``grouped_mm`` counts each expert's tokens with ``torch.histc`` on int32 on every device
    but CPU and MPS, and the bridge has no HPU kernel for ``aten::histc`` nor for
    ``aten::_grouped_mm`` (gaudi-pytorch-bridge ``scripts/ops_list/ops_table.csv``): both go
    to the CPU fallback, whose kernel refuses an integer histc ("histogram_cpu" not
    implemented for 'Int'; the plugin's own HPU kernel for it is in
    :mod:`.transformers_gaudi_ops`), and every layer's experts would run on the host.
    Transformers decides once, in ``get_correct_experts_implementation`` (init and
    ``set_experts_implementation``), before any weight is on a device, with no per-device
    default; the choice is made there, on Transformers' own interface, so the config says
    what runs. A name the user gave, ``grouped_mm`` included, is kept. Transformers 4.x has
    no experts interface (its MoE layers loop over experts): nothing to adapt, nothing said.
    """
    if not hasattr(module, "ALL_EXPERTS_FUNCTIONS"):
        return
    cls = getattr(module, "PreTrainedModel", None)
    original = original_of(
        cls, "get_correct_experts_implementation", HOST, "experts",
        "PreTrainedModel.get_correct_experts_implementation (experts interface starts at 5.0)",
        own=True,
    )
    if original is None:
        return

    @functools.wraps(original)
    def get_correct_experts_implementation(self: Any, requested_experts: str | None) -> str:
        chosen = original(self, requested_experts)
        if requested_experts is None and fp8_experts(self.config) and registry.device_available():
            say_once(
                "experts-fp8", logging.INFO,
                "hpu_plugin: %s is fp8-quantized and names no experts_implementation; using "
                "'eager' on Gaudi: each expert's layers run the fp8 linear on the HPU, while "
                "Transformers' fp8 batched and grouped experts need its CUDA kernels.",
                type(self).__name__,
            )
            return "eager"
        if requested_experts is None and chosen == DEFAULT_EXPERTS and registry.device_available():
            say_once(
                "experts-batched-mm", logging.INFO,
                "hpu_plugin: %s names no experts_implementation; using %r on Gaudi (%r runs "
                "aten::_grouped_mm, which Gaudi has no kernel for: it would run on the CPU). "
                "Pass experts_implementation=... to choose.",
                type(self).__name__, GAUDI_EXPERTS, DEFAULT_EXPERTS,
            )
            return GAUDI_EXPERTS
        return chosen

    patches.set(cls, "get_correct_experts_implementation", ours(get_correct_experts_implementation))


#: The report ``transformers env`` prints starts with this key (4.51 to 5.x).
ENV_REPORT_KEY = "`transformers` version"


def _with_gaudi_section(format_dict: Callable[[dict[str, Any]], str]) -> Callable[..., str]:
    @functools.wraps(format_dict)
    def format_with_gaudi(d: dict[str, Any]) -> str:
        if isinstance(d, dict) and ENV_REPORT_KEY in d:
            d = {**d, **gaudi_section(shown=d)}
        return format_dict(d)

    return ours(format_with_gaudi)


def install_env_cli(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    """``transformers env`` (5.x) gains the Gaudi section.

    Typer registered ``env`` itself when the CLI module was imported, so the function cannot
    be replaced; the module-level formatter it calls at run time can.
    """
    original = original_of(module, "_format_dict", HOST, "env", "cli.system._format_dict")
    if original is not None:
        patches.set(module, "_format_dict", _with_gaudi_section(original))


def install_env_command(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    """``transformers env`` (4.51 to 4.57) gains the Gaudi section."""
    cls = getattr(module, "EnvironmentCommand", None)
    original = inspect.getattr_static(cls, "format_dict", None) if cls is not None else None
    if not isinstance(original, staticmethod):
        stay_out(HOST, "env", "commands.env.EnvironmentCommand.format_dict")
    elif not is_ours(original.__func__):
        patches.set(cls, "format_dict", staticmethod(_with_gaudi_section(original.__func__)))


def install_device_binding(registry: Registry, patches: Patches,
                           module: types.ModuleType) -> None:
    """Transformers' distributed set-up binds a Gaudi process to the one device it holds.

    Transformers 5's tensor, fully sharded and expert parallel set-up (``tp_plan="auto"``,
    ``DistributedConfig``) binds each process with ``_bind_local_device(type, LOCAL_RANK)``,
    which calls ``torch.accelerator.set_device_index(LOCAL_RANK)``. A Gaudi process drives
    exactly one device, always ``hpu:0`` (which module it is was chosen by
    ``HABANA_VISIBLE_MODULES`` / ``HLS_MODULE_ID`` or acquired by type), and the bridge's
    device guard refuses any other index (``habana active device: 1 != 0``), so every rank
    but the first failed. On ``hpu`` the binding is to ``hpu:0``; other device types, and a
    user's own ``set_device_index`` call, are left to torch and the bridge.
    """
    original = original_of(module, "_bind_local_device", HOST, "device binding",
                           "distributed.utils._bind_local_device")
    if original is None:
        return

    @functools.wraps(original)
    def _bind_local_device(device_type: str, local_rank: int) -> Any:
        if device_type != "hpu":
            return original(device_type, local_rank)
        import torch

        torch.accelerator.set_device_index(0)
        return torch.device("hpu", 0)

    patches.set(module, "_bind_local_device", ours(_bind_local_device))


def other_device(value: Any) -> str | None:
    """The first device in a ``device`` or ``device_map`` value that names an ``hpu`` index
    other than 0 (``"hpu:1"``, ``torch.device("hpu", 1)``, or an int, an accelerator index),
    as text; None where there is none."""
    for item in value.values() if isinstance(value, dict) else (value,):
        # any integer type (numpy's from an index array too), as torch takes them
        if isinstance(item, numbers.Integral) and not isinstance(item, bool) and item > 0:
            return repr(int(item))
        text = str(item) if type(item).__name__ == "device" else item
        if isinstance(text, str) and text.startswith("hpu:") and text[4:].isdigit() and int(
                text[4:]) > 0:
            return repr(text)
    return None


def refuse_other_device(name: str, value: Any) -> None:
    """Refuse, before any weight is read, a device the Gaudi software would refuse at the
    first tensor put there (``habana active device: 1 != 0``): multi-GPU recipes give each
    rank device ``LOCAL_RANK`` (``device_map={"": PartialState().process_index}``)."""
    chosen = other_device(value)
    if chosen is not None:
        fix = ("device_map='hpu' (or {'': 'hpu'}, or {'': PartialState().device})"
               if name == "device_map" else f"{name}='hpu'")
        raise ValueError(
            f"{name}={value!r} names the device {chosen}: a Gaudi process drives one device, "
            "always hpu:0 (which module it is comes from HABANA_VISIBLE_MODULES and the "
            "launcher's LOCAL_RANK, one process per device). Fix: give every rank "
            f"{fix}")


def _flash_request(kwargs: dict[str, Any]) -> str | None:
    """The flash-attention implementation a ``from_pretrained`` call asks for, if any: in
    ``attn_implementation`` (a name, ``paged|`` prefixed or not, or a name per sub-config),
    or in the config the Auto classes pass on with the request inside."""
    asked = kwargs.get("attn_implementation") or getattr(
        kwargs.get("config"), "_attn_implementation_internal", None)
    names = asked.values() if isinstance(asked, dict) else [asked]
    return next((name for name in names if isinstance(name, str)
                 and name.removeprefix("paged|").startswith("flash_attention")), None)


def install_device_index_check(registry: Registry, patches: Patches,
                               module: types.ModuleType) -> None:
    """``from_pretrained(device_map=...)`` naming another Gaudi than this process's is
    refused before loading; a flash-attention request that Transformers refuses on a Gaudi
    machine is refused with the Gaudi's fix; any other call goes to Transformers unchanged."""
    cls = getattr(module, "PreTrainedModel", None)
    original = original_of(cls, "from_pretrained", HOST, "device index check",
                           "PreTrainedModel.from_pretrained (a classmethod)", own=True)
    if not isinstance(original, classmethod):
        return
    function = original.__func__

    @functools.wraps(function)
    def from_pretrained(owner: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("device_map") is not None and registry.device_available():
            refuse_other_device("device_map", kwargs["device_map"])
        try:
            return function(owner, *args, **kwargs)
        except (ImportError, ValueError) as exc:
            flash = _flash_request(kwargs)
            if (flash is not None and "flash" in str(exc).lower()
                    and registry.device_available()):
                raise ImportError(
                    f"attn_implementation={flash!r} needs the flash-attn package, CUDA kernels "
                    "that do not run on Gaudi (and Transformers' kernels from the Hub have no "
                    "Gaudi build). Fix: pass attn_implementation='sdpa', or leave it out (the "
                    "default): on Gaudi, hpu-plugin runs sdpa attention through Gaudi's fused "
                    "flash-attention kernel (FusedSDPA), packed sequences included"
                ) from exc
            raise

    patches.set(cls, "from_pretrained", ours(classmethod(from_pretrained)))


def install(registry: Registry, patches: Patches, available: bool) -> None:
    """Register the post-import hooks; only availability when no device is ready."""

    def hook(adapter: Callable[..., None], *extra: Any) -> Callable[[types.ModuleType], None]:
        return lambda module: adapter(registry, patches, module, *extra)

    importhook.when_imported("transformers.utils.import_utils", hook(install_availability))
    if not available:
        return
    importhook.when_imported("transformers.training_args", hook(install_training_args))
    importhook.when_imported("transformers.modeling_utils", hook(install_experts))
    importhook.when_imported("transformers.modeling_utils", hook(install_device_index_check))
    importhook.when_imported("transformers.pipelines.base", hook(install_pipeline))
    importhook.when_imported("transformers.distributed.utils", hook(install_device_binding))
    importhook.when_imported("transformers.quantizers.quantizer_bnb_4bit", hook(install_bnb, 4))
    importhook.when_imported("transformers.quantizers.quantizer_bnb_8bit", hook(install_bnb, 8))
    importhook.when_imported("transformers.quantizers.auto",
                             hook(transformers_fp8.install_registration))
    importhook.when_imported("transformers.modeling_utils", hook(transformers_fp8.install_switch))
    importhook.when_imported("transformers.quantizers.quantizer_finegrained_fp8",
                             hook(transformers_fp8_hub.install_validate))
    importhook.when_imported("transformers.integrations.finegrained_fp8",
                             hook(transformers_fp8_hub.install_linear))
    transformers_set_losses.install(patches)
    importhook.when_imported("transformers.cli.system", hook(install_env_cli))
    importhook.when_imported("transformers.commands.env", hook(install_env_command))
