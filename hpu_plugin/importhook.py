"""Post-import hooks: run a callback once a named module has finished executing.

Activation runs inside ``import torch``, which a host may trigger half-way through its own
import (``import accelerate`` imports torch before ``accelerate.utils`` exists). So an
adapter registers a callback here, which runs at once for a module fully imported, when a
module still initialising finishes, or right after a module not yet imported executes:
patching the origin before the host's other modules import it means they bind the
replacement themselves. One finder of ours on ``sys.meta_path`` serves every owner
(``"hosts"``, ``"emulator"``), and undoing one owner drops only its callbacks.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
import threading
import types
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger("hpu_plugin")

Callback = Callable[[types.ModuleType], None]
#: (owner, callback): who registered it, so :func:`remove` drops only that owner's.
_Entry = tuple[str, Callback]


def _initializing(module: types.ModuleType) -> bool:
    spec = getattr(module, "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


class _Loader(importlib.abc.Loader):
    """Delegates to the real loader and fires the callbacks after the module executed."""

    def __init__(self, inner: Any, finder: PostImportFinder, name: str) -> None:
        self._inner, self._finder, self._name = inner, finder, name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        create = getattr(self._inner, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: types.ModuleType) -> None:
        # Hand the real loader back so introspection (and reloads) never see this proxy.
        module.__loader__ = self._inner
        if module.__spec__ is not None:
            module.__spec__.loader = self._inner
        self._inner.exec_module(module)
        self._finder.fire(self._name, module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class PostImportFinder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``; does nothing for modules nobody waits for."""

    def __init__(self) -> None:
        self.pending: dict[str, list[_Entry]] = {}
        self.initializing: dict[str, list[_Entry]] = {}
        self._lock = threading.RLock()
        self._local = threading.local()

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if self.initializing:
            self.poll()
        if fullname not in self.pending or getattr(self._local, "busy", False):
            return None
        self._local.busy = True
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._local.busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Loader(spec.loader, self, fullname)
        return spec

    def when_imported(self, name: str, callback: Callback, owner: str) -> None:
        with self._lock:
            module = sys.modules.get(name)
            if module is None:
                self.pending.setdefault(name, []).append((owner, callback))
                return
            if _initializing(module):
                self.initializing.setdefault(name, []).append((owner, callback))
                return
        _run(name, module, callback)

    def forget(self, owner: str) -> bool:
        """Drop ``owner``'s callbacks; whether any other owner's still wait."""
        with self._lock:
            for waiting in (self.pending, self.initializing):
                for name in list(waiting):
                    waiting[name] = [entry for entry in waiting[name] if entry[0] != owner]
                    if not waiting[name]:
                        del waiting[name]
            return bool(self.pending or self.initializing)

    def poll(self) -> None:
        """Fire callbacks of modules that were mid-import and have finished since."""
        with self._lock:
            done = [name for name in self.initializing
                    if name in sys.modules and not _initializing(sys.modules[name])]
            ready = [(name, self.initializing.pop(name)) for name in done]
        for name, entries in ready:
            for _, callback in entries:
                _run(name, sys.modules[name], callback)

    def fire(self, name: str, module: types.ModuleType) -> None:
        with self._lock:
            entries = self.pending.pop(name, [])
        for _, callback in entries:
            _run(name, module, callback)


def _run(name: str, module: types.ModuleType, callback: Callback) -> None:
    try:
        callback(module)
    except Exception as exc:  # an adapter fault must never break the host's import
        from hpu_plugin.patching import record_out

        record_out(name.split(".")[0], f"for {name}", f"failed: {exc!r}")
        log.warning("hpu_plugin: the adapter for %s (%s) failed and stays out: %r",
                    name, getattr(callback, "__qualname__", callback), exc)


_finder: PostImportFinder | None = None


def finder() -> PostImportFinder:
    """The process's finder, put first on ``sys.meta_path`` on first use."""
    global _finder
    if _finder is None:
        _finder = PostImportFinder()
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
    return _finder


def when_imported(name: str, callback: Callback, owner: str = "hosts") -> None:
    finder().when_imported(name, callback, owner)


def pending(owner: str = "hosts") -> list[str]:
    """The modules some callback of ``owner`` still waits for (the diagnostics import them)."""
    if _finder is None:
        return []
    return [name for name, entries in list(_finder.pending.items())
            if any(entry[0] == owner for entry in entries)]


def remove(owner: str = "hosts") -> None:
    """Forget ``owner``'s pending callbacks (``hosts.uninstall``, tests); the finder leaves
    ``sys.meta_path`` when no one else waits."""
    global _finder
    if _finder is not None and not _finder.forget(owner):
        if _finder in sys.meta_path:
            sys.meta_path.remove(_finder)
        _finder = None
