"""torch: ``torch.compile`` and ``init_process_group`` ask the registry.

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

from hpu_plugin.hosts.callers import find_caller
from hpu_plugin.patching import Patches, is_ours, original_of, ours, stay_out
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
    ``hccl`` group is then checked across ranks (:mod:`hpu_plugin.hosts.preflight`).
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
            from hpu_plugin.hosts.preflight import init_with_preflight

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


def install(registry: Registry, patches: Patches) -> None:
    install_compile(registry, patches)
    install_distributed(registry, patches)
