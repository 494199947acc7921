"""Transformers: availability, TrainingArguments' compile backend, pipeline device, bnb placement.

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
import re
import types
from collections.abc import Callable
from typing import Any

from hpu_plugin.hosts import importhook, transformers_gaudi_ops
from hpu_plugin.hosts.env_section import gaudi_section
from hpu_plugin.hosts.patching import Patches, cached_like, host_version, say_once, stay_out
from hpu_plugin.registry import Registry

log = logging.getLogger("hpu_plugin")

HOST = "transformers"
DEVICE_TYPE = "hpu"
#: Transformers turns HPU off below this Accelerate release (R3): the first with HPU code.
MIN_ACCELERATE = (1, 5, 0)


def _release(version: str) -> tuple[int, ...]:
    match = re.match(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", version.strip())
    if match is None:
        return ()
    return tuple(int(part) for part in match.groups() if part is not None)


def accelerate_allows_hpu(accelerate_version: str | None) -> bool:
    """R3: no Accelerate, or Accelerate >= 1.5.0. Logs the fix once when it says no."""
    if accelerate_version is None or accelerate_version == "?":
        return True
    if _release(accelerate_version) >= MIN_ACCELERATE:
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


def make_is_torch_hpu_available(
    registry: Registry, original: Callable[..., Any], patches: Patches | None = None
) -> Callable[..., bool]:
    """The registry's answer, under R3, with the host's cache API and compile marker.

    The original is not called: besides answering, it patches ``torch.gather``,
    ``torch.scatter`` and ``torch.compile`` with Python wrappers, which would put a
    Python frame on every CPU gather and pre-empt the compile hooks. Its Gaudi workarounds
    are installed instead as HPU kernels, when it would have installed them: on a True
    answer (``transformers_gaudi_ops``; the compile hooks own ``torch.compile``).
    """
    release = _release(host_version(HOST))

    def is_torch_hpu_available() -> bool:
        answer = registry.device_available() and accelerate_allows_hpu(_installed_accelerate())
        if answer and patches is not None:
            _keep_gaudi_workarounds(patches, release)
        return answer

    return cached_like(original, is_torch_hpu_available)


def install_availability(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    original = getattr(module, "is_torch_hpu_available", None)
    if original is None:
        stay_out(HOST, "availability", "is_torch_hpu_available (HPU support starts at 4.51)")
        return
    if getattr(original, "__hpu_plugin__", False):
        return
    patches.replace_everywhere(
        original, make_is_torch_hpu_available(registry, original, patches)
    )


def install_training_args(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    """R13: ``torch_compile=True`` takes its backend from the compile hooks on Gaudi."""
    cls = getattr(module, "TrainingArguments", None)
    original = getattr(cls, "__post_init__", None)
    if cls is None or original is None or not hasattr(cls, "torch_compile_backend"):
        stay_out(HOST, "TrainingArguments", "TrainingArguments.torch_compile_backend")
        return
    if getattr(original, "__hpu_plugin__", False):
        return

    @functools.wraps(original)
    def __post_init__(self: Any) -> None:
        wants_compile = self.torch_compile or self.torch_compile_mode is not None
        if wants_compile and self.torch_compile_backend is None and not self.use_cpu:
            from transformers.utils import import_utils

            if import_utils.is_torch_hpu_available():
                chosen = registry.compile_backend(None, DEVICE_TYPE)
                if isinstance(chosen, str):
                    self.torch_compile_backend = chosen
        original(self)

    __post_init__.__hpu_plugin__ = True  # type: ignore[attr-defined]
    patches.set(cls, "__post_init__", __post_init__)


def install_pipeline(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    """R8: with no ``device``, a pipeline runs on the device this process uses."""
    cls = getattr(module, "Pipeline", None)
    original = vars(cls).get("__init__") if cls is not None else None
    if original is None:
        stay_out(HOST, "pipeline", "pipelines.base.Pipeline.__init__")
        return
    if getattr(original, "__hpu_plugin__", False):
        return

    parameters = list(inspect.signature(original).parameters)
    if "device" not in parameters:
        stay_out(HOST, "pipeline", "device parameter in Pipeline.__init__")
        return
    device_position = parameters.index("device") - 1  # without self

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("device") is None and len(args) <= device_position:
            model = kwargs.get("model", args[0] if args else None)
            if getattr(model, "hf_device_map", None) is None:
                properties = registry.device_properties()
                if properties is not None:
                    kwargs["device"] = properties.current
        original(self, *args, **kwargs)

    __init__.__hpu_plugin__ = True  # type: ignore[attr-defined]
    patches.set(cls, "__init__", __init__)


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
    """R9: bitsandbytes with no ``device_map`` places the model where the hooks say."""
    cls = getattr(module, f"Bnb{bits}BitHfQuantizer", None)
    original = vars(cls).get("update_device_map") if cls is not None else None
    if original is None:
        stay_out(HOST, f"bitsandbytes {bits}-bit", f"Bnb{bits}BitHfQuantizer.update_device_map")
        return
    if getattr(original, "__hpu_plugin__", False):
        return

    @functools.wraps(original)
    def update_device_map(self: Any, device_map: Any) -> Any:
        if registry.device_available():
            chosen = registry.quantization_device_map(
                "bitsandbytes", bits, device_map, DEVICE_TYPE,
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

    update_device_map.__hpu_plugin__ = True  # type: ignore[attr-defined]
    patches.set(cls, "update_device_map", update_device_map)


#: The report ``transformers env`` prints starts with this key (4.51 to 5.x).
ENV_REPORT_KEY = "`transformers` version"


def _with_gaudi_section(format_dict: Callable[[dict[str, Any]], str]) -> Callable[..., str]:
    @functools.wraps(format_dict)
    def format_with_gaudi(d: dict[str, Any]) -> str:
        if isinstance(d, dict) and ENV_REPORT_KEY in d:
            d = {**d, **gaudi_section(shown=d)}
        return format_dict(d)

    format_with_gaudi.__hpu_plugin__ = True  # type: ignore[attr-defined]
    return format_with_gaudi


def install_env_cli(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    """``transformers env`` (5.x) gains the Gaudi section.

    Typer registered ``env`` itself when the CLI module was imported, so the function cannot
    be replaced; the module-level formatter it calls at run time can.
    """
    original = getattr(module, "_format_dict", None)
    if original is None:
        stay_out(HOST, "env", "cli.system._format_dict")
    elif not getattr(original, "__hpu_plugin__", False):
        patches.set(module, "_format_dict", _with_gaudi_section(original))


def install_env_command(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    """``transformers env`` (4.51 to 4.57) gains the Gaudi section."""
    cls = getattr(module, "EnvironmentCommand", None)
    original = inspect.getattr_static(cls, "format_dict", None) if cls is not None else None
    if not isinstance(original, staticmethod):
        stay_out(HOST, "env", "commands.env.EnvironmentCommand.format_dict")
    elif not getattr(original.__func__, "__hpu_plugin__", False):
        patches.set(cls, "format_dict", staticmethod(_with_gaudi_section(original.__func__)))


def install(registry: Registry, patches: Patches, available: bool) -> None:
    """Register the post-import hooks; only availability when no device is ready."""

    def hook(adapter: Callable[..., None], *extra: Any) -> Callable[[types.ModuleType], None]:
        return lambda module: adapter(registry, patches, module, *extra)

    importhook.when_imported("transformers.utils.import_utils", hook(install_availability))
    if not available:
        return
    importhook.when_imported("transformers.training_args", hook(install_training_args))
    importhook.when_imported("transformers.pipelines.base", hook(install_pipeline))
    importhook.when_imported("transformers.quantizers.quantizer_bnb_4bit", hook(install_bnb, 4))
    importhook.when_imported("transformers.quantizers.quantizer_bnb_8bit", hook(install_bnb, 8))
    importhook.when_imported("transformers.cli.system", hook(install_env_cli))
    importhook.when_imported("transformers.commands.env", hook(install_env_command))
