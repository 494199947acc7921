"""One PluginManager for the process: loads plugins, isolates their faults, answers hosts.

Plugins come from the ``hpu_plugin`` entry-point group only; the four first-party plugins
are declared there by this package's own ``pyproject.toml``, so they load, order and
disable exactly like a third party's. Switches (read once, when the registry is built):

``HPU_PLUGIN_DISABLE=name,...``  skip these plugins (``HPU_PLUGIN_DISABLE=1`` turns the
                                 whole package off; see ``activation``)
``HPU_PLUGIN_ONLY=name,...``     load only these plugins
``HPU_PLUGIN_NO_THIRD_PARTY=1``  load no entry point outside this distribution

A plugin that fails to import, raises in a hook or returns a value of the wrong type is
reported once (name, distribution, version, exception) and skipped; the decision falls to
the next implementation. The program goes on.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import types
from collections.abc import Callable, Generator, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import pluggy

from hpu_plugin import hookspecs

log = logging.getLogger("hpu_plugin")

DIST_NAME = "hpu-plugin"
ENTRY_POINT_GROUP = hookspecs.PROJECT

#: What a deciding hook may return besides ``None``; anything else is a plugin fault.
RESULT_TYPES: Mapping[str, tuple[type, ...] | Callable[[Any], bool]] = {
    "hpu_device_available": (bool,),
    "hpu_device_properties": (hookspecs.DeviceProperties,),
    "hpu_compile_backend": lambda value: isinstance(value, str) or callable(value),
    "hpu_ddp_backend": (str,),
    "hpu_quantization_device_map": (str, dict),
}

_TRUE = {"1", "true", "yes", "on"}


class ConfigurationError(ValueError):
    """A switch of ours holds a value we cannot use; the message names it and the fix."""


def _names(environ: Mapping[str, str], variable: str) -> frozenset[str]:
    raw = environ.get(variable, "")
    return frozenset(part.strip() for part in raw.split(",") if part.strip())


@dataclass(frozen=True)
class Selection:
    """Which plugins may load, from the environment switches."""

    disabled: frozenset[str] = frozenset()
    only: frozenset[str] | None = None
    third_party: bool = True

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> Selection:
        disabled = _names(environ, "HPU_PLUGIN_DISABLE") - _TRUE
        only = _names(environ, "HPU_PLUGIN_ONLY") or None
        no_third = environ.get("HPU_PLUGIN_NO_THIRD_PARTY", "").strip().lower()
        if no_third not in _TRUE | {"", "0", "false", "no", "off"}:
            raise ConfigurationError(
                f"HPU_PLUGIN_NO_THIRD_PARTY={environ['HPU_PLUGIN_NO_THIRD_PARTY']!r} is not "
                "a switch: set it to 1 to load no third-party plugins, or unset it."
            )
        return cls(disabled=disabled, only=only, third_party=no_third not in _TRUE)

    def refuses(self, name: str, first_party: bool) -> str | None:
        """Why ``name`` must not load, or ``None`` when it may."""
        if name in self.disabled:
            return "disabled by HPU_PLUGIN_DISABLE"
        if self.only is not None and name not in self.only:
            return "not in HPU_PLUGIN_ONLY"
        if not first_party and not self.third_party:
            return "third-party plugins off (HPU_PLUGIN_NO_THIRD_PARTY)"
        return None


@dataclass
class PluginRecord:
    """One entry point as ``hpu-plugin plugins`` shows it."""

    name: str
    value: str
    distribution: str
    version: str
    first_party: bool
    status: str = "enabled"  # enabled | disabled | failed
    reason: str = ""
    hooks: list[str] = field(default_factory=list)


class Registry:
    """The process's plugins and the decisions hosts ask them for."""

    def __init__(self, selection: Selection | None = None) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.selection = selection if selection is not None else Selection.from_environ()
        self.records: dict[str, PluginRecord] = {}
        self._reported: set[tuple[str, str]] = set()
        self._available: bool | None = None
        self._lock = threading.Lock()

    # -- loading ---------------------------------------------------------------------------

    def load_entry_points(self, entry_points: Iterable[metadata.EntryPoint] | None = None) -> None:
        """Register every plugin of the ``hpu_plugin`` group that the switches allow."""
        if entry_points is None:
            entry_points = metadata.entry_points(group=ENTRY_POINT_GROUP)
        for ep in entry_points:
            dist = getattr(ep, "dist", None)
            record = PluginRecord(
                name=ep.name,
                value=ep.value,
                distribution=dist.name if dist is not None else "?",
                version=dist.version if dist is not None else "?",
                first_party=ep.value.startswith("hpu_plugin."),
            )
            if ep.name in self.records:
                record.status, record.reason = "failed", "duplicate plugin name"
                self._report(record, "duplicate", f"another plugin is already named {ep.name!r}")
                continue
            self.records[ep.name] = record
            refusal = self.selection.refuses(ep.name, record.first_party)
            if refusal:
                record.status, record.reason = "disabled", refusal
                continue
            try:
                plugin = ep.load()
            except Exception as exc:  # a broken plugin must not break the host program
                record.status, record.reason = "failed", f"import failed: {exc!r}"
                self._report(record, "import", record.reason)
                continue
            self.register(plugin, record)

    def register(self, plugin: object, record: PluginRecord) -> None:
        """Register ``plugin`` behind a guard that isolates each of its hook functions."""
        self.records.setdefault(record.name, record)
        guarded = types.SimpleNamespace()
        for attr in dir(plugin):
            function = getattr(plugin, attr, None)
            if not callable(function) or getattr(function, hookspecs.PROJECT + "_impl", None) is None:
                continue
            setattr(guarded, attr, self._guard(record, attr, function))
            record.hooks.append(attr)
        try:
            self.pm.register(guarded, name=record.name)
        except Exception as exc:  # e.g. a hook name no spec declares, a wrong argument name
            record.status, record.reason = "failed", f"rejected by pluggy: {exc}"
            record.hooks.clear()
            self._report(record, "register", record.reason)

    def _guard(self, record: PluginRecord, hook: str, function: Callable[..., Any]) -> Callable[..., Any]:
        opts = getattr(function, hookspecs.PROJECT + "_impl")
        if opts.get("wrapper") or opts.get("hookwrapper"):
            return self._guard_wrapper(record, hook, function)
        check = RESULT_TYPES.get(hook)

        @functools.wraps(function)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                result = function(*args, **kwargs)
            except hookspecs.Refusal:
                raise
            except Exception as exc:
                self._report(record, hook, f"raised {exc!r}; skipped")
                return None
            if result is not None and check is not None and not _matches(check, result):
                self._report(
                    record, hook + ":type", f"returned {result!r} ({type(result).__name__}), "
                    "which the hook spec does not allow; skipped"
                )
                return None
            return result

        return guarded

    def _guard_wrapper(
        self, record: PluginRecord, hook: str, function: Callable[..., Any]
    ) -> Callable[..., Any]:
        """A faulty wrapper becomes a pass-through: the wrapped result goes on unchanged."""

        @functools.wraps(function)
        def guarded(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            try:
                inner = function(*args, **kwargs)
                next(inner)
            except Exception as exc:
                self._report(record, hook, f"wrapper raised {exc!r} before yield; skipped")
                return (yield)
            outcome = yield
            try:
                inner.send(outcome)
            except StopIteration as stop:
                return stop.value
            except hookspecs.Refusal:
                raise
            except Exception as exc:
                self._report(record, hook, f"wrapper raised {exc!r} after yield; skipped")
                return outcome
            self._report(record, hook, "wrapper yielded twice; skipped")
            return outcome

        return guarded

    def _report(self, record: PluginRecord, kind: str, message: str) -> None:
        key = (record.name, kind)
        if key in self._reported:
            return
        self._reported.add(key)
        log.warning(
            "hpu_plugin: plugin %r (%s %s) %s", record.name, record.distribution,
            record.version, message,
        )
        if kind in ("import", "register", "duplicate"):
            return
        if not record.reason:
            record.reason = message

    # -- decisions -------------------------------------------------------------------------

    def prepare_environment(self, environ: MutableMapping[str, str]) -> None:
        self.pm.hook.hpu_prepare_environment(environ=environ)

    def device_available(self) -> bool:
        """Cached for the life of the process: hosts cache their own answer the same way."""
        if self._available is None:
            with self._lock:
                if self._available is None:
                    self._available = bool(self.pm.hook.hpu_device_available())
        return self._available

    def device_properties(self) -> hookspecs.DeviceProperties | None:
        if not self.device_available():
            return None
        result: hookspecs.DeviceProperties | None = self.pm.hook.hpu_device_properties()
        return result

    def compile_backend(
        self, requested: hookspecs.CompileBackend | None, device_type: str
    ) -> hookspecs.CompileBackend | None:
        result: hookspecs.CompileBackend | None = self.pm.hook.hpu_compile_backend(
            requested=requested, device_type=device_type
        )
        return result

    def ddp_backend(self, device_type: str, requested: str | None) -> str | None:
        result: str | None = self.pm.hook.hpu_ddp_backend(device_type=device_type, requested=requested)
        return result

    def quantization_device_map(
        self, method: str, bits: int, device_map: hookspecs.DeviceMap | None, device_type: str
    ) -> hookspecs.DeviceMap | None:
        result: hookspecs.DeviceMap | None = self.pm.hook.hpu_quantization_device_map(
            method=method, bits=bits, device_map=device_map, device_type=device_type
        )
        return result

    def call_order(self, hook: str) -> list[str]:
        """Plugin names in the order pluggy asks them (first asked first)."""
        caller = getattr(self.pm.hook, hook)
        return [impl.plugin_name for impl in reversed(caller.get_hookimpls())]


def _matches(check: tuple[type, ...] | Callable[[Any], bool], value: object) -> bool:
    if isinstance(check, tuple):
        return isinstance(value, check)
    return check(value)


_registry: Registry | None = None
_registry_lock = threading.Lock()


def get_registry() -> Registry:
    """The process's registry, built and loaded on first use."""
    global _registry
    if _registry is None:
        with _registry_lock:
            if _registry is None:
                registry = Registry()
                registry.load_entry_points()
                _registry = registry
    return _registry


def reset_registry() -> None:
    """Forget the process's registry (tests, and ``hpu-plugin`` after changing switches)."""
    global _registry
    with _registry_lock:
        _registry = None
