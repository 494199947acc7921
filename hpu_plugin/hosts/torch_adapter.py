"""torch: ``torch.compile`` and ``init_process_group`` ask the registry; ``torch.hpu.device``
restores nothing its enter did not change.

``torch.compile`` is replaced as soon as activation runs (the end of ``torch/__init__``),
so a ``@torch.compile`` decorator in modeling code imported afterwards is covered, whoever
imports it. Transformers >= 4.55 installs a compile wrapper of its own inside
``is_torch_hpu_available``; a hook decides the backend here, so that wrapper is refused
(it would rewrite the request before any hook saw it).
"""

from __future__ import annotations

import functools
import logging
import types
from collections.abc import Callable
from typing import Any

from hpu_plugin.gaudi.software import DEVICE_TYPE, GAUDI_DISTRIBUTION
from hpu_plugin.hosts.callers import find_caller
from hpu_plugin.patching import (
    Patches,
    host_version,
    is_ours,
    original_of,
    ours,
    record_out,
    stay_out,
)
from hpu_plugin.registry import Registry
from hpu_plugin.reporting import Once, say_once

log = logging.getLogger("hpu_plugin")


def _describe(backend: object) -> str:
    if backend is None:
        return "the default ('inductor')"
    if isinstance(backend, str):
        return repr(backend)
    return getattr(backend, "__name__", repr(backend))


#: ``torch.compile`` calls made by libraries while they were imported (``file:line``), whose
#: backend was replaced without a warning; ``hpu-plugin info`` counts them.
import_time_decorations: list[str] = []


def _say_replaced(requested: object, chosen: object, warned: Once) -> None:
    """Warn once per requested backend, naming the caller's file and line; a library's own
    decoration at import time is logged at debug (the user did not write it)."""
    caller = find_caller(3)
    where = caller.where if caller is not None else "an unknown caller"
    if caller is not None and caller.import_time_library:
        import_time_decorations.append(where)
        log.debug(
            "hpu_plugin: torch.compile at %s (a library, while it is imported): backend %s "
            "replaced by %s", where, _describe(requested), _describe(chosen),
        )
        return
    key = requested if isinstance(requested, str) or requested is None else id(requested)
    warned.say(
        key, logging.WARNING,
        "hpu_plugin: torch.compile backend %s at %s does not run on Gaudi (hpu); using %s. "
        "Pass backend=%r to silence this warning.",
        _describe(requested), where, _describe(chosen), chosen,
    )


def make_compile(registry: Registry, original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.compile`` with the backend chosen by ``registry.compile_backend``."""
    warned = Once()  # requested backends warned about by this wrapper

    @functools.wraps(original)
    def compile(*args: Any, **kwargs: Any) -> Any:
        if not args and kwargs.get("model") is None:
            kwargs.pop("model", None)

            def decorate(model: Callable[..., Any]) -> Any:
                return compile(model, **kwargs)

            return decorate
        requested = kwargs.get("backend")
        chosen = registry.compile_backend(requested)
        if chosen is None or chosen is requested or chosen == requested:
            return original(*args, **kwargs)
        kwargs["backend"] = chosen
        _say_replaced(requested, chosen, warned)
        return original(*args, **kwargs)

    return ours(compile)


def _is_transformers_compile_wrapper(value: object) -> bool:
    return (
        getattr(value, "__module__", "") == "transformers.utils.import_utils"
        and getattr(value, "__name__", "") == "hpu_backend_compile"
    )


def _guard_torch_module(torch: types.ModuleType, patches: Patches) -> None:
    """Keep ``torch.compile`` routed through the hooks when Transformers re-patches it."""
    base = type(torch)

    class GuardedTorchModule(base):  # type: ignore[valid-type, misc]
        __slots__ = ()

        def __setattr__(self, name: str, value: Any) -> None:
            if name == "compile" and _is_transformers_compile_wrapper(value):
                say_once(
                    "transformers-compile-wrapper", logging.INFO,
                    "hpu_plugin: Transformers' own HPU torch.compile wrapper is not installed; "
                    "the hpu_compile_backend hooks choose the backend instead.",
                )
                return
            super().__setattr__(name, value)

    try:
        torch.__class__ = GuardedTorchModule
    except TypeError as exc:
        stay_out("torch", "compile guard", f"assignable module class ({exc})")
        return

    def undo() -> None:
        torch.__class__ = base

    patches.on_undo(undo)


def install_compile(registry: Registry, patches: Patches) -> None:
    import torch

    original = original_of(torch, "compile", "torch", "torch.compile", "torch.compile")
    if original is None:
        return
    patches.set(torch, "compile", make_compile(registry, original))
    _guard_torch_module(torch, patches)


def make_init_process_group(registry: Registry, original: Callable[..., Any]) -> Callable[..., Any]:
    """``init_process_group`` whose missing backend comes from ``registry.ddp_backend``.

    A backend the caller named is kept, but still shown to the hooks first so that one
    that cannot work on Gaudi is refused before any process waits on a collective. An
    ``hccl`` group is then checked across ranks (:mod:`hpu_plugin.hosts.preflight_store`).
    """

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        requested = args[0] if args else kwargs.get("backend")
        chosen = registry.ddp_backend(requested)
        if requested is None and chosen is not None:
            if args:
                args = (chosen, *args[1:])
            else:
                kwargs["backend"] = chosen
        if (chosen or requested) == "hccl":
            from hpu_plugin.hosts.preflight_store import init_with_preflight

            return init_with_preflight(registry, original, args, kwargs)
        return original(*args, **kwargs)

    return ours(init_process_group)


def install_distributed(registry: Registry, patches: Patches) -> None:
    import torch.distributed as dist

    if not dist.is_available():
        return
    from torch.distributed import distributed_c10d

    original = original_of(
        distributed_c10d, "init_process_group", "torch", "init_process_group",
        "torch.distributed.init_process_group",
    )
    if original is None:
        return
    patches.replace_everywhere(
        original, make_init_process_group(registry, original), alias_scope="torch.distributed"
    )
    # A layer of the Gaudi software may have wrapped ``torch.distributed.init_process_group``
    # before us (the GPU Migration Toolkit maps ``nccl`` to ``hccl`` there, and calls the
    # function it saved, not ours): wrap that one too, so the hooks and the pre-flight check
    # still come first, and the toolkit's mapping runs inside them.
    outer = getattr(dist, "init_process_group", None)
    if outer is not None and outer is not original and not is_ours(outer):
        patches.set(dist, "init_process_group", make_init_process_group(registry, outer))


# -- torch.hpu.device --------------------------------------------------------------------
#
# ``torch.utils.checkpoint`` (gradient checkpointing: TRL 1.16 turns it on by default, and
# Transformers' ``gradient_checkpointing_enable``) saves and restores the RNG state of each
# device inside ``torch.hpu.device(index)``. Read in the Gaudi bridge 1.19.0
# (``habana_frameworks/torch/hpu/__init__.py``, ``device`` and ``set_device``; the public
# repository's later versions of the file keep the same class): ``idx`` is the process's
# module id from ``HLS_MODULE_ID``, -1 when unset; ``__enter__`` returns early when
# ``idx == -1``, but ``__exit__`` calls ``set_device(self.idx)`` whenever ``prev_idx`` (0 once
# Accelerate or the user called ``torch.hpu.set_device(0)``) differs from it, so
# ``set_device(-1)``. With fewer than 8 modules visible, ``HABANA_VISIBLE_MODULES`` unset and
# ``HLS_MODULE_ID`` unset (a pod or a machine with 1 to 7 Gaudis) that asserts "the only
# supported device idx is 0"; on a whole server it writes the last module's id into
# ``HLS_MODULE_ID``. The adapted exit restores nothing when its enter selected nothing (as
# CUDA's does when its enter replaced no device); when the enter did select a device, the
# bridge's own exit runs unchanged. Setting ``HLS_MODULE_ID``
# instead would reach every child process. The guard is the bridge's own code: its enter and
# exit are run against a recording ``set_device`` (never the real one), and the adapter is
# installed only when that exit selects a device its enter did not select.

DEVICE_CONTEXT = "torch.hpu.device exit"
#: The only names the bridge's enter and exit may use for the probe to be harmless.
_PROBED_NAMES = frozenset({"idx", "prev_idx", "set_device", "current_device_idx"})


class _RecordingSetDevice:
    """Stands in for the bridge's ``set_device`` while its context code is probed."""

    def __init__(self, current: int) -> None:
        self.current_device_idx = current
        self.calls: list[object] = []

    def __call__(self, device: object) -> None:
        self.calls.append(device)


def _with_set_device(function: Any, set_device: _RecordingSetDevice) -> Any:
    """``function``'s own code, with ``set_device`` bound to the recorder: nothing of the
    bridge changes (its module's namespace is copied, not edited)."""
    namespace = dict(function.__globals__, set_device=set_device)
    return types.FunctionType(
        function.__code__, namespace, function.__name__, function.__defaults__,
        function.__closure__,
    )


def exit_selects_unentered_device(device_class: type) -> bool | None:
    """Whether the class's exit selects a device when its enter, with no module id
    (``idx == -1``) after ``set_device(0)``, selected none: the bridge's fault. None when the
    code is not the kind the adapter was written for (the probe would not be harmless)."""
    enter, exit_ = vars(device_class).get("__enter__"), vars(device_class).get("__exit__")
    if not all(isinstance(f, types.FunctionType) for f in (enter, exit_)):
        return None
    if not {"set_device", "idx", "prev_idx"} <= set(exit_.__code__.co_names) or not (
        set(enter.__code__.co_names) | set(exit_.__code__.co_names)
    ) <= _PROBED_NAMES:
        return None
    if any(f.__closure__ or any(isinstance(c, types.CodeType) for c in f.__code__.co_consts)
           for f in (enter, exit_)):
        return None  # a closure or a nested function: names the check above cannot see
    recorder = _RecordingSetDevice(current=0)
    try:
        context = device_class.__new__(device_class)
        context.idx, context.prev_idx = -1, -1
        _with_set_device(enter, recorder)(context)
        if recorder.calls:  # an enter that selects a device without a module id: not 1.19's
            return None
        _with_set_device(exit_, recorder)(context, None, None, None)
    except Exception:
        return None
    return bool(recorder.calls)


def make_device_exit(original: Callable[..., Any]) -> Callable[..., Any]:
    """The bridge's exit, skipped when the enter selected no device (its own rule: it
    selects one when ``idx`` is a module id other than ``prev_idx``)."""

    @functools.wraps(original)
    def __exit__(self: Any, *exc: Any) -> Any:
        if self.idx == -1 or self.idx == self.prev_idx:
            return False
        return original(self, *exc)

    return ours(__exit__)


def install_device_context(patches: Patches, hpu: types.ModuleType | None = None) -> None:
    """Adapt ``torch.hpu.device`` where the bridge has the fault; say why not otherwise."""
    if hpu is None:
        import torch

        hpu = getattr(torch, DEVICE_TYPE, None)
        if hpu is None:  # no Gaudi software loaded: there is no context manager to adapt
            return
    device_class = getattr(hpu, "device", None)
    found = isinstance(device_class, type)
    original = original_of(
        device_class if found else None, "__exit__", GAUDI_DISTRIBUTION, DEVICE_CONTEXT,
        "torch.hpu.device class with __enter__ and __exit__", own=True,
    )
    if original is None:
        return
    assert isinstance(device_class, type)
    faulty = exit_selects_unentered_device(device_class)
    if faulty is None:
        stay_out(
            GAUDI_DISTRIBUTION, DEVICE_CONTEXT,
            "torch.hpu.device of the kind read in 1.19.0 (its enter and exit use only idx, "
            "prev_idx and set_device)",
        )
    elif not faulty:
        record_out(
            GAUDI_DISTRIBUTION, DEVICE_CONTEXT,
            f"not needed: the exit of {GAUDI_DISTRIBUTION} {host_version(GAUDI_DISTRIBUTION)}'s "
            "torch.hpu.device selects no device its enter did not",
        )
        log.info("hpu_plugin: torch.hpu.device needs no adapter on this Gaudi software")
    else:
        patches.set(device_class, "__exit__", make_device_exit(original))


def install(registry: Registry, patches: Patches) -> None:
    install_compile(registry, patches)
    install_distributed(registry, patches)
    install_device_context(patches)
