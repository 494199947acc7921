"""How an adapter or a fast path replaces a host's function: find it, say once when it is
missing, dress the replacement as the original and rebind it wherever the host bound it.

Every change still goes through a :class:`~hpu_plugin.patching.Patches`, so it is recorded
and undone with the rest.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from typing import Any

from hpu_plugin.patching import Patches, is_ours, ours, record_out
from hpu_plugin.reporting import say_once


def host_version(distribution: str) -> str:
    from importlib import metadata  # only when asked: most imports of this module never do

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "?"


def stay_out(host: str, adapter: str, missing: str) -> None:
    """The one line an adapter logs when the host is not what it was written for."""
    record_out(host, adapter, f"{host} {host_version(host)} has no {missing}")
    say_once(f"stay-out:{host}:{adapter}", logging.WARNING,
             "hpu_plugin: %s %s has no %s; the %s adapter stays out (supported: see the "
             "hpu-plugin README).", host, host_version(host), missing, adapter)


def original_of(owner: Any, name: str, host: str, adapter: str, missing: str, *,
                found: bool = True, own: bool = False) -> Any | None:
    """The host attribute an adapter replaces, or ``None`` when there is nothing to do: the
    look-up every ``install_*`` starts with (in the owner's own ``__dict__`` with ``own``).
    Missing, or ``found`` (the adapter's other prerequisites) false: the one stay-out line
    naming ``missing``. Already ours: quiet."""
    value = None if owner is None else vars(owner).get(name) if own else getattr(owner, name, None)
    if value is None or not found:
        stay_out(host, adapter, missing)
        return None
    return None if is_ours(value) else value


def cached_like(original: Callable[..., Any], replacement: Callable[..., Any]) -> Any:
    """``replacement`` dressed as the host function it replaces: ``lru_cache`` (hosts and
    tests call ``cache_clear``), the docstring and Transformers 5's dynamo constant marker."""
    inner = getattr(original, "__wrapped__", original)
    if getattr(inner, "_dynamo_marked_constant", False) or getattr(
            original, "_dynamo_marked_constant", False):
        replacement._dynamo_marked_constant = True  # type: ignore[attr-defined]
    replacement.__doc__ = original.__doc__
    return ours(functools.lru_cache(replacement))


def replace_everywhere(patches: Patches, original: Any, replacement: object,
                       alias_scope: str | None = None) -> list[str]:
    """Rebind every module attribute that is ``original``; return where it was found.

    Hosts bind helpers by name when imported (``from .utils import is_torch_hpu_available``),
    so replacing the origin alone misses the modules imported before. Every module is
    checked under the function's own name; the modules of the host that defines it (or of
    ``alias_scope``) and ``__main__`` are also searched for aliases: a few ms, where an
    identity scan of every module costs ~25 ms.
    """
    name = getattr(original, "__name__", None)
    scope = alias_scope or (getattr(original, "__module__", None) or "").split(".")[0]
    found = []
    for module_name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        if module_name == "__main__" or (scope and (
                module_name == scope or module_name.startswith(scope + "."))):
            attrs = [attr for attr, value in list(namespace.items()) if value is original]
        else:
            attrs = [name] if name is not None and namespace.get(name) is original else []
        for attr in attrs:
            patches.set(module, attr, replacement)
            found.append(f"{module_name}.{attr}")
    return found
