"""Every change the package makes to what it does not own, recorded and reversible.

Attributes and environment variables go through a :class:`Patches`, any other change
through its ``on_undo``: recorded in ``made`` (``hpu-plugin info`` lists it) and undone
newest first by its one ``undo``. :data:`this_process` holds every ``Patches`` of the
process, the plugin registry, what stayed out and the summary. What the real Gaudi stack
also changes for the life of a process is left outside on purpose (docs/architecture.md
lists each).
"""

from __future__ import annotations

import os
import threading
import types
import weakref
from collections.abc import Callable, MutableMapping
from typing import Any

_MISSING = object()


def record_out(host: str, adapter: str, reason: str) -> None:
    """Remember that an adapter is not installed, and why (the diagnostics show it)."""
    this_process.stayed_out.setdefault(f"{host} {adapter}", reason)


def ours(replacement: Any) -> Any:
    """Mark ``replacement`` as the plugin's, so a second install never wraps it again."""
    replacement.__hpu_plugin__ = True
    return replacement


def is_ours(value: object) -> bool:
    return bool(getattr(value, "__hpu_plugin__", False))


class _Restore:
    """How to undo a change on one object: ``function(owner)``."""

    __slots__ = ("function",)

    def __init__(self, function: Callable[[Any], None]) -> None:
        self.function = function


def _before(owner: Any, name: str) -> Any:
    """What ``owner.name`` was, kept without a strong reference to ``owner``: a method bound
    to it is kept as its function and bound again on undo."""
    value = vars(owner).get(name, _MISSING)
    if isinstance(value, types.MethodType) and value.__self__ is owner:
        function = value.__func__
        return _Restore(lambda obj: setattr(obj, name, types.MethodType(function, obj)))
    return value


class Patches:
    """Every replacement made, so it can be undone in reverse order, and said (``made``)."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []
        #: What was changed, in order (``"torch.manual_seed"``, ``"os.environ['PATH']"``).
        self.made: list[str] = []
        self._instances: dict[str, weakref.WeakKeyDictionary[Any, Any]] = {}

    def on_undo(self, undo: Callable[[], None], what: str | None = None) -> None:
        """Record a change made another way than :meth:`set` (undone in order)."""
        self._undo.append(undo)
        self.made.append(what or getattr(undo, "__qualname__", repr(undo)))

    def set(self, owner: Any, name: str, value: Any) -> None:
        old = vars(owner).get(name, _MISSING)
        setattr(owner, name, value)

        def undo() -> None:
            if old is not _MISSING:
                setattr(owner, name, old)
            elif name in vars(owner):
                delattr(owner, name)

        self.on_undo(undo, f"{getattr(owner, '__name__', type(owner).__name__)}.{name}")

    def set_on_instance(self, owner: Any, name: str, value: Any,
                        restore: Callable[[Any], None] | None = None) -> None:
        """``owner.name = value`` on one object (a model's norm layer, an optimizer), undone
        while the object lives. Objects are held weakly, so a patched model is freed as it
        would be without the plugin; ``made`` names each class and attribute once.
        ``restore(owner)``, where given, undoes it instead of putting the old value back (an
        old value that refers to ``owner`` would keep it alive)."""
        key = f"{type(owner).__qualname__}.{name} of each object given it"
        given = self._instances.get(key)
        if given is None:
            given = self._instances[key] = weakref.WeakKeyDictionary()

            def undo() -> None:
                for instance, old in list(given.items()):
                    if isinstance(old, _Restore):
                        old.function(instance)
                    elif old is _MISSING:
                        vars(instance).pop(name, None)
                    else:
                        setattr(instance, name, old)
                given.clear()
                self._instances.pop(key, None)

            self.on_undo(undo, key)
        if owner not in given:
            given[owner] = _Restore(restore) if restore is not None else _before(owner, name)
        setattr(owner, name, value)

    def set_item(self, mapping: MutableMapping[str, str], key: str, value: str,
                 what: str) -> None:
        """``mapping[key] = value`` (``os.environ``), restored on undo; ``what`` names it."""
        old = mapping.get(key)
        mapping[key] = value
        self.on_undo(lambda: mapping.pop(key, None) if old is None else mapping.__setitem__(
            key, old), what)

    def setenv(self, name: str, value: str) -> None:
        """``os.environ[name] = value``, restored (or removed again) on undo."""
        self.set_item(os.environ, name, value, environ_entry(name))

    def undo(self) -> None:
        while self._undo:
            self._undo.pop()()
        self.made.clear()


def environ_entry(name: str) -> str:
    """How :meth:`Patches.setenv` names a variable in ``made``."""
    return f"os.environ[{name!r}]"


class Activation:
    """Everything activation made in this process, in one place, undone by one call.

    Each part has its own :class:`Patches`, so ``hpu-plugin info`` can say which part of the
    plugin made a change: ``environment`` (the Gaudi defaults activation exported; taken
    back when the plugin ends failed, so they never reach child processes as the user's),
    ``emulator`` (``torch.manual_seed``, ``PATH``), ``search_path`` (the emulator's
    stand-ins on ``sys.path``, withdrawn when the emulator does not run: hosts that find
    ``habana_frameworks`` take their Gaudi branches), ``hosts`` (the adapters' and fast
    paths' decision points) and ``gpu_migration`` (the emulated GPU Migration Toolkit).
    ``registry`` is the plugin registry (``registry.get_registry()`` builds it),
    ``stayed_out`` which adapters are not installed and why, ``summary`` the report the
    hosts' ``env`` commands show.
    """

    def __init__(self) -> None:
        self.environment, self.emulator, self.search_path = Patches(), Patches(), Patches()
        self.hosts, self.gpu_migration = Patches(), Patches()
        # a registry.Registry; typed loosely because registry imports this module
        self.registry: Any = None
        self.lock = threading.RLock()  # re-entrant: see registry.get_registry
        self.stayed_out: dict[str, str] = {}
        self.summary: Callable[[], dict[str, str]] | None = None
        self.hosts_installed = False  # also when they changed nothing

    def made(self) -> dict[str, list[str]]:
        """What each part changed, in order (``hpu-plugin info`` lists it)."""
        return {"hosts": list(self.hosts.made),
                "emulator": list(self.search_path.made) + list(self.emulator.made),
                "environment": list(self.environment.made),
                "gpu_migration": list(self.gpu_migration.made)}

    def undo_hosts(self) -> None:
        """Take the host adapters back (tests, and a failed activation)."""
        self.hosts.undo()
        self.stayed_out.clear()
        self.summary = None
        self.hosts_installed = False

    def undo(self) -> None:
        """Take back everything, newest first: what depends on the emulator goes before it."""
        self.undo_hosts()
        for part in (self.gpu_migration, self.emulator, self.search_path, self.environment):
            part.undo()


#: The one activation of this process.
this_process = Activation()
