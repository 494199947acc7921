"""Every change the package makes to what it does not own, recorded and reversible.

The host adapters' attributes, the emulator's (``torch.manual_seed``, ``PATH``), the Gaudi
defaults activation exports and the emulator's stand-ins on ``sys.path`` all go through a
:class:`Patches`: recorded (``made``, which ``hpu-plugin info`` lists) and undone in reverse
order by the one :meth:`Patches.undo`. :data:`this_process` (an :class:`Activation`) holds
them all. Left outside: what the real Gaudi stack also changes for the life of the process
(the emulated ``set_device`` and hccl's rank variables, the emulator's ``torch.hpu``), and
the environment of the plugin's own programs, set at their start (docs/architecture.md
lists each).

Host modules bind helpers by name when they are imported (``from .utils import
is_torch_hpu_available``), so replacing the origin alone misses every module imported
before: :meth:`Patches.replace_everywhere` also rebinds each module attribute that *is*
the original object (an identity scan over ``sys.modules``).
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import sys
import types
import weakref
from collections.abc import Callable, MutableMapping
from typing import Any

from hpu_plugin.reporting import say_once

_MISSING = object()


def host_version(distribution: str) -> str:
    from importlib import metadata  # only when asked: most imports of this module never do

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "?"


def record_out(host: str, adapter: str, reason: str) -> None:
    """Remember that an adapter is not installed, and why (the diagnostics show it)."""
    this_process.stayed_out.setdefault(f"{host} {adapter}", reason)


def stay_out(host: str, adapter: str, missing: str) -> None:
    """The one line an adapter logs when the host is not what it was written for."""
    record_out(host, adapter, f"{host} {host_version(host)} has no {missing}")
    say_once(
        f"stay-out:{host}:{adapter}", logging.WARNING,
        "hpu_plugin: %s %s has no %s; the %s adapter stays out (supported: see the "
        "hpu-plugin README).", host, host_version(host), missing, adapter,
    )


def ours(replacement: Any) -> Any:
    """Mark ``replacement`` as the plugin's, so a second install never wraps it again."""
    replacement.__hpu_plugin__ = True
    return replacement


def is_ours(value: object) -> bool:
    return bool(getattr(value, "__hpu_plugin__", False))


def original_of(
    owner: Any, name: str, host: str, adapter: str, missing: str, *, found: bool = True,
    own: bool = False,
) -> Any | None:
    """The host attribute an adapter replaces, or ``None`` when the adapter has nothing to do.

    The sequence every ``install_*`` starts with: look ``name`` up on ``owner`` (in its own
    ``__dict__`` with ``own``, so an inherited attribute is not taken for the class's); when it
    is missing, or ``found`` (the adapter's other prerequisites) is false, log the one
    stay-out line naming ``missing``; when it is already ours, stay quiet.
    """
    if owner is None:
        value = None
    else:
        value = vars(owner).get(name) if own else getattr(owner, name, None)
    if value is None or not found:
        stay_out(host, adapter, missing)
        return None
    return None if is_ours(value) else value


def cached_like(original: Callable[..., Any], replacement: Callable[..., Any]) -> Any:
    """``replacement`` dressed as the host function it replaces: ``lru_cache`` (hosts and
    tests call ``cache_clear``), the docstring, Transformers 5's dynamo constant marker,
    and our own marker so it is never wrapped twice."""
    inner = getattr(original, "__wrapped__", original)
    if getattr(inner, "_dynamo_marked_constant", False) or getattr(
        original, "_dynamo_marked_constant", False
    ):
        replacement._dynamo_marked_constant = True  # type: ignore[attr-defined]
    replacement.__doc__ = original.__doc__
    return ours(functools.lru_cache(replacement))


def _weak_method(value: Any, owner: Any) -> Any:
    """What an instance attribute was, without a strong reference to ``owner`` (a method
    bound to it is kept as its function, bound again on undo)."""
    if isinstance(value, types.MethodType) and value.__self__ is owner:
        return _Bound(value.__func__)
    return value


class _Bound:
    """A method that was bound to the patched object: its function."""

    __slots__ = ("function",)

    def __init__(self, function: Any) -> None:
        self.function = function


class _Restore(_Bound):
    """How to undo a change on the patched object: ``function(owner)``."""

    __slots__ = ()


def _put_back(owner: Any, name: str, old: Any) -> None:
    if old is _MISSING:
        vars(owner).pop(name, None)
    elif isinstance(old, _Restore):
        old.function(owner)
    elif isinstance(old, _Bound):
        setattr(owner, name, types.MethodType(old.function, owner))
    else:
        setattr(owner, name, old)


class Patches:
    """Every replacement made, so it can be undone in reverse order, and said (``made``)."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []
        #: What was changed, in order (``"torch.manual_seed"``, ``"os.environ['PATH']"``).
        self.made: list[str] = []
        #: (class, attribute) -> the instances given it, with what they had before
        self._instances: dict[tuple[type, str], weakref.WeakKeyDictionary[Any, Any]] = {}

    def on_undo(self, undo: Callable[[], None], what: str | None = None) -> None:
        """Record a change made another way than :meth:`set` (it is undone in order)."""
        self._undo.append(undo)
        self.made.append(what or getattr(undo, "__qualname__", repr(undo)))

    def set(self, owner: Any, name: str, value: Any) -> None:
        old = vars(owner).get(name, _MISSING)
        setattr(owner, name, value)

        def undo() -> None:
            if old is _MISSING:
                try:
                    delattr(owner, name)
                except AttributeError:
                    pass
            else:
                setattr(owner, name, old)

        self.on_undo(undo, f"{getattr(owner, '__name__', type(owner).__name__)}.{name}")

    def set_on_instance(self, owner: Any, name: str, value: Any,
                        restore: Callable[[Any], None] | None = None) -> None:
        """``owner.name = value`` on one object (a model's norm layer, an optimizer), undone
        like :meth:`set` while the object lives. The objects are held weakly, so a patched
        model or optimizer is freed as it would be without the plugin; ``made`` names each
        class and attribute once, however many objects were given it. ``restore(owner)``,
        where given, undoes it instead of putting the old value back (for an old value that
        refers to ``owner``, which would keep it alive); it must not refer to ``owner``."""
        key = (type(owner), name)
        given = self._instances.get(key)
        if given is None:
            given = self._instances[key] = weakref.WeakKeyDictionary()

            def undo() -> None:
                for instance, old in list(given.items()):
                    _put_back(instance, name, old)
                given.clear()
                self._instances.pop(key, None)

            self.on_undo(undo, f"{type(owner).__qualname__}.{name} of each object given it")
        if owner not in given:
            given[owner] = (_Restore(restore) if restore is not None
                            else _weak_method(vars(owner).get(name, _MISSING), owner))
        setattr(owner, name, value)

    def set_item(self, mapping: MutableMapping[str, str], key: str, value: str,
                 what: str) -> None:
        """``mapping[key] = value`` (``os.environ``), restored on undo; ``what`` names it."""
        old = mapping.get(key)
        mapping[key] = value

        def undo() -> None:
            if old is None:
                mapping.pop(key, None)
            else:
                mapping[key] = old

        self.on_undo(undo, what)

    def setenv(self, name: str, value: str) -> None:
        """``os.environ[name] = value``, restored (or removed again) on undo."""
        self.set_item(os.environ, name, value, environ_entry(name))

    def unsetenv(self, name: str) -> None:
        """Remove ``os.environ[name]``; put back on undo."""
        old = os.environ.pop(name, None)
        if old is not None:
            self.on_undo(lambda: os.environ.__setitem__(name, old), f"del {environ_entry(name)}")

    def add_path(self, entry: str) -> None:
        """Append ``entry`` to ``sys.path`` unless it is there. Undo removes it and forgets
        the modules imported from it, so nothing of it stays in use."""
        if entry in sys.path:
            return
        sys.path.append(entry)

        def undo() -> None:
            if entry in sys.path:
                sys.path.remove(entry)
            importlib.invalidate_caches()
            for name, module in list(sys.modules.items()):
                if (getattr(module, "__file__", None) or "").startswith(entry):
                    del sys.modules[name]

        self.on_undo(undo, f"sys.path += {entry!r}")

    def replace_everywhere(
        self, original: Any, replacement: object, alias_scope: str | None = None
    ) -> list[str]:
        """Rebind every module attribute that is ``original``; return where it was found.

        Every module is checked under the function's own name (how hosts and users import
        it); the modules of the host that defines it (or of ``alias_scope``), and
        ``__main__``, are also searched for aliases. A full identity scan of every module
        costs ~25 ms with Transformers loaded; this costs a few ms.
        """
        name = getattr(original, "__name__", None)
        scope = alias_scope or (getattr(original, "__module__", None) or "").split(".")[0]
        found = []
        for module_name, module in list(sys.modules.items()):
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            in_scope = scope and (module_name == scope or module_name.startswith(scope + "."))
            if module_name == "__main__" or in_scope:
                attrs = [attr for attr, value in list(namespace.items()) if value is original]
            elif name is not None and namespace.get(name) is original:
                attrs = [name]
            else:
                continue
            for attr in attrs:
                self.set(module, attr, replacement)
                found.append(f"{module_name}.{attr}")
        return found

    def undo(self) -> None:
        while self._undo:
            self._undo.pop()()
        self.made.clear()


def environ_entry(name: str) -> str:
    """How :meth:`Patches.setenv` names a variable in ``made``."""
    return f"os.environ[{name!r}]"


class Activation:
    """Everything activation changed in this process, in one place, undone by one call.

    Activation fills it; the hosts, the emulator and the diagnostics read and add to the one
    instance, :data:`this_process`. Each group of changes has its own :class:`Patches` so
    that ``hpu-plugin info`` can say which part of the plugin made it:

    - ``environment``: the Gaudi defaults the ``hpu_prepare_environment`` hooks added. Taken
      back when the plugin ends failed, so they never reach child processes as if the user
      had set them; the diagnostics tell the user's settings from ours by it.
    - ``emulator``: what the emulator changed (``torch.manual_seed``, ``PATH``).
    - ``search_path``: the emulator's stand-ins for ``habana_frameworks`` on ``sys.path``:
      withdrawn when the emulator does not run, or hosts that find ``habana_frameworks``
      take their Gaudi branches into a device that is not there.
    - ``hosts``: the host adapters' and fast paths' decision points.
    - ``gpu_migration``: what the emulated GPU migration toolkit changed, once imported.

    ``stayed_out`` says which adapters are not installed and why; ``summary`` is the
    plugin's brief report that the hosts' ``env`` commands show (the plugin registry itself
    is ``registry.get_registry()``'s, which imports this module).
    """

    def __init__(self) -> None:
        self.environment = Patches()
        self.emulator = Patches()
        self.search_path = Patches()
        self.hosts = Patches()
        self.gpu_migration = Patches()
        #: "host adapter" -> why it stayed out, for ``hpu-plugin info`` and ``doctor``.
        self.stayed_out: dict[str, str] = {}
        self.summary: Callable[[], dict[str, str]] | None = None
        #: Whether the host adapters were installed (also when they changed nothing).
        self.hosts_installed = False

    def made(self) -> dict[str, list[str]]:
        """What each part changed, in order (``hpu-plugin info`` lists it)."""
        return {
            "hosts": list(self.hosts.made),
            "emulator": list(self.search_path.made) + list(self.emulator.made),
            "environment": list(self.environment.made),
            "gpu_migration": list(self.gpu_migration.made),
        }

    def undo_hosts(self) -> None:
        """Take the host adapters back (tests, and a failed activation)."""
        self.hosts.undo()
        self.stayed_out.clear()
        self.summary = None
        self.hosts_installed = False

    def undo(self) -> None:
        """Take back everything, newest first: what depends on the emulator goes before it."""
        self.undo_hosts()
        self.gpu_migration.undo()
        self.emulator.undo()
        self.search_path.undo()
        self.environment.undo()


#: The one activation of this process.
this_process = Activation()
