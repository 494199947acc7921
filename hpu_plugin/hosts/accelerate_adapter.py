"""Accelerate: availability, distributed backend, precision and ``accelerate env``.

Accelerate >= 1.5.0 has HPU branches behind ``is_hpu_available``; answering it from the
registry routes the default device, MULTI_HPU, seeding, RNG checkpoints, memory and
``accelerate config``. What the hooks own beyond availability is wrapped where Accelerate
decides it: the collective backend (``PartialState._prepare_backend``) and the device lines
of ``accelerate env`` (no release lists HPU). ``accelerate launch`` without
``--num_processes`` already starts ``torch.hpu.device_count()`` processes, a count that
takes no device; asking for more (the device's name, the current index) would take a Gaudi
in the launcher process, which then holds the module its rank 0 needs.
Older releases have no MULTI_HPU at all, so every adapter stays out of them.
"""

from __future__ import annotations

import builtins
import contextvars
import functools
import logging
import os
import types
from collections.abc import Callable
from typing import Any

from hpu_plugin import importhook, settings
from hpu_plugin.gaudi import generations
from hpu_plugin.gaudi.software import DEVICE_TYPE
from hpu_plugin.hookspecs import Refusal
from hpu_plugin.hosts.env_section import gaudi_section
from hpu_plugin.hosts.replacing import cached_like, original_of, replace_everywhere
from hpu_plugin.patching import Patches, is_ours, ours, record_out
from hpu_plugin.registry import Registry
from hpu_plugin.reporting import say_once

log = logging.getLogger("hpu_plugin")

HOST = "accelerate"


def make_is_hpu_available(registry: Registry, original: Callable[..., Any]) -> Callable[..., bool]:
    """The registry's answer, keeping ``init_hccl`` (it loads the HCCL backend) and the cache."""

    def is_hpu_available(init_hccl: bool = False) -> bool:
        if not registry.device_available():
            return False
        if init_hccl:
            import importlib.util

            if importlib.util.find_spec("habana_frameworks") is not None:
                import habana_frameworks.torch.distributed.hccl  # noqa: F401
        return True

    return cached_like(original, is_hpu_available)


def install_availability(registry: Registry, patches: Patches, module: types.ModuleType) -> bool:
    original = getattr(module, "is_hpu_available", None)
    if original is None:
        record_out(HOST, "adapters", f"accelerate {_version()} has no is_hpu_available (HPU "
                   "support starts at 1.5.0)")
        say_once(
            "accelerate-no-hpu", logging.WARNING,
            "hpu_plugin: accelerate %s has no HPU support (it starts at 1.5.0), so Transformers "
            "and Accelerate will not use Gaudi: pip install 'accelerate>=1.5.0'.",
            getattr(module, "__version__", None) or _version(),
        )
        return False
    if not is_ours(original):
        replace_everywhere(patches, original, make_is_hpu_available(registry, original))
    return True


def _version() -> str:
    from hpu_plugin.hosts.replacing import host_version

    return host_version(HOST)


def install_state(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    """The backend of a MULTI_HPU job comes from the DDP hooks unless the user named one."""
    cls = getattr(module, "PartialState", None)
    multi_hpu = getattr(getattr(module, "DistributedType", None), "MULTI_HPU", None)
    original = original_of(
        cls, "_prepare_backend", HOST, "distributed backend",
        "PartialState._prepare_backend with MULTI_HPU", found=multi_hpu is not None, own=True,
    )
    if original is None:
        return

    @functools.wraps(original)
    def _prepare_backend(
        self: Any, cpu: bool = False, sagemaker_dp: bool = False, backend: str | None = None
    ) -> tuple[str | None, Any]:
        chosen_backend, distributed_type = original(self, cpu, sagemaker_dp, backend)
        if distributed_type == multi_hpu:
            chosen = registry.ddp_backend(backend)
            if backend is None and chosen is not None:
                chosen_backend = chosen
        return chosen_backend, distributed_type

    patches.set(cls, "_prepare_backend", ours(_prepare_backend))
    install_device_index(patches, cls, multi_hpu)
    install_precision_check(registry, patches, getattr(module, "AcceleratorState", None))


def _use_cpu() -> bool:
    """``ACCELERATE_USE_CPU`` as Accelerate reads it (``y``, ``t``, ``on``... count). A value
    Accelerate refuses counts as set, so Accelerate's own error is the one the user sees."""
    try:
        from accelerate.utils.environment import parse_flag_from_env
    except ImportError:
        return settings.gaudi_flag(os.environ.get("ACCELERATE_USE_CPU"))
    try:
        return bool(parse_flag_from_env("ACCELERATE_USE_CPU"))
    except ValueError:
        return True


def install_precision_check(registry: Registry, patches: Patches, cls: Any) -> None:
    """fp16 on a first-generation Gaudi, which cannot compute in it, is refused as Accelerate
    sets up (``Accelerator(mixed_precision="fp16")``, the ``Trainer``'s ``fp16=True``,
    ``accelerate launch --mixed_precision fp16``), naming the setting and bf16 as the fix,
    rather than failing inside the first forward pass."""
    original = original_of(cls, "__init__", HOST, "mixed precision check",
                           "AcceleratorState.__init__", own=True)
    if original is None:
        return

    @functools.wraps(original)
    def __init__(self: Any, mixed_precision: Any = None, cpu: bool = False, *args: Any,
                 **kwargs: Any) -> None:
        wanted = os.environ.get("ACCELERATE_MIXED_PRECISION", "no") if (
            mixed_precision is None) else mixed_precision
        elsewhere = cpu or _use_cpu()
        # set up already (Accelerate's own AcceleratorState() calls): its precision stands
        decided = "_mixed_precision" in getattr(cls, "_shared_state", {})
        if str(getattr(wanted, "value", wanted)).lower() == "fp16" and not (
                elsewhere or decided):
            properties = registry.device_properties()
            generation = properties and generations.generation_from_name(properties.generation)
            if generation:
                generations.check_dtype(generation, "fp16")
        original(self, mixed_precision, cpu, *args, **kwargs)

    patches.set(cls, "__init__", ours(__init__))


def install_device_index(patches: Patches, cls: Any, multi_hpu: Any) -> None:
    """A launcher's ``ACCELERATE_TORCH_DEVICE=hpu`` means the process's current Gaudi.

    Ray Train sets ``ACCELERATE_TORCH_DEVICE`` to ``str(get_device())``, which for a worker
    with ``{"HPU": 1}`` is ``hpu`` without an index (Ray's HPU device manager answers
    ``torch.device("hpu")``). Accelerate keeps that device as it is, and its DDP branch for
    HPU passes ``device_ids=[device.index]``: ``[None]``, which torch's DDP cannot take (its
    fallback for a missing index knows CUDA, XPU, MPS, MTIA and PrivateUse1, not HPU), so
    ``Trainer.train()`` fails in ``prepare``. Without the variable Accelerate itself picks
    ``hpu:<current device>``; the same device, named with its index, is what it gets here.
    Only in a MULTI_HPU job: a single process keeps Accelerate's own index-less ``hpu``; a
    device with an index, or of another type, is left exactly as set.
    """
    original = original_of(cls, "set_device", HOST, "device index",
                           "PartialState.set_device", own=True)
    if original is None:
        return

    @functools.wraps(original)
    def set_device(self: Any) -> Any:
        result = original(self)
        device = getattr(self, "device", None)
        if (
            getattr(self, "distributed_type", None) == multi_hpu
            and getattr(device, "type", None) == DEVICE_TYPE
            and device.index is None
        ):
            import torch

            self.device = torch.device(DEVICE_TYPE, torch.hpu.current_device())
        return result

    patches.set(cls, "set_device", ours(set_device))


#: The Gaudi lines of the ``accelerate env`` call running in this context, if any.
_env_extra: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "hpu_plugin_accelerate_env_extra", default=None
)


def _print_with_hpu(*values: Any, **kwargs: Any) -> None:
    """``print`` for ``accelerate.commands.env``: inside the adapted ``env_command``, its
    report gains the Gaudi lines; everywhere else, the builtin unchanged."""
    extra = _env_extra.get()
    text = values[0] if len(values) == 1 and isinstance(values[0], str) else None
    if extra is not None and text is not None and text.startswith("- `Accelerate` version:"):
        text = text.replace("- PyTorch accelerator: N/A", "- PyTorch accelerator: HPU")
        text += "".join(f"\n- {key}: {value}" for key, value in extra.items())
        values = (text,)
    builtins.print(*values, **kwargs)


def install_env(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    """``accelerate env`` lists the Gaudi devices (no Accelerate release does).

    The command prints its report with the builtin ``print``; the module gets a ``print`` of
    its own (:func:`_print_with_hpu`) that adds the Gaudi lines during the command only.
    """
    original = original_of(module, "env_command", HOST, "env", "commands.env.env_command")
    if original is None:
        return

    @functools.wraps(original)
    def env_command(args: Any) -> Any:
        try:
            properties = registry.device_properties()
        except Refusal as refusal:  # a diagnostic shows the fault instead of dying of it
            extra = {"HPU": f"not usable: {refusal}"}
        else:
            if properties is None:
                return original(args)
            extra = {"HPU type": properties.generation, "HPU count": str(properties.count)}
        extra.update(gaudi_section(shown=extra))
        token = _env_extra.set(extra)
        try:
            info = original(args)
        finally:
            _env_extra.reset(token)
        if isinstance(info, dict):
            if info.get("PyTorch accelerator") == "N/A":
                info["PyTorch accelerator"] = "HPU"
            info.update(extra)
        return info

    if "print" not in vars(module):
        patches.set(module, "print", ours(_print_with_hpu))
    replace_everywhere(patches, original, ours(env_command))


def install(registry: Registry, patches: Patches, available: bool) -> None:
    """Register the post-import hooks; only availability when no device is ready."""

    def availability(module: types.ModuleType) -> None:
        if not install_availability(registry, patches, module) or not available:
            return
        for name, adapter in (
            ("accelerate.state", install_state),
            ("accelerate.commands.env", install_env),
        ):
            importhook.when_imported(
                name, lambda m, adapter=adapter: adapter(registry, patches, m)
            )

    importhook.when_imported("accelerate.utils.imports", availability)
