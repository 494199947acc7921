"""One PluginManager for the process: loads plugins, isolates their faults, answers hosts.

Plugins come from the ``hpu_plugin`` entry-point group only; the four first-party plugins
are declared there by this package's own ``pyproject.toml``, so they load, order and
disable exactly like a third party's. Switches (read once, when the registry is built;
a value we cannot use raises :class:`ConfigurationError`, which activation logs):

``HPU_PLUGIN_DISABLE=name,...``    skip these plugins, as pytest's ``-p no:name``
                                   (``HPU_PLUGIN_DISABLE=1`` turns the whole package off)
``HPU_PLUGIN_ONLY=name,...``       load only these plugins (first-party ones included)
``HPU_PLUGIN_NO_THIRD_PARTY=1``    load no entry point outside this distribution
``HPU_PLUGIN_IMPORT_BUDGET=secs``  a plugin whose import takes longer is cut off (default 2)

Names are entry-point names, as ``hpu-plugin plugins`` lists them, or ``distribution:name``.

Order. pluggy asks ``tryfirst`` implementations, then plain ones, then ``trylast`` ones,
with wrappers around them all; among equals it asks the plugin registered *last* first.
Entry-point iteration order is not something to build on, so the registry fixes it:
third-party plugins are registered first, in descending name order, then the first-party
ones. Hence among plain implementations the first-party plugin is asked first, and
third-party ones after it in ascending name order; a third party takes precedence only by
asking for it (``tryfirst=True`` or a wrapper) and becomes a fallback with ``trylast=True``.

Faults. A plugin that fails at import, is cut off by its import budget, raises in a hook
(anything short of KeyboardInterrupt, ``SystemExit`` included) or returns a value the hook
spec does not declare, or one the host cannot use, is reported once per kind of fault
(name, distribution, version, exception) and skipped; the decision falls to the next
implementation and the program goes on. Only :class:`hookspecs.Refusal` crosses the guard:
it is a plugin's deliberate answer to the user, not a fault.

The pieces live beside this module: :mod:`hpu_plugin.switches` (which plugins may load),
:mod:`hpu_plugin.loader` (finding and importing them within the budget) and
:mod:`hpu_plugin.guard` (the guard around every hook form); this module ties them to one
PluginManager and answers the hosts.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import time
import types
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from importlib import metadata
from typing import Any

import pluggy

from hpu_plugin import hookspecs
from hpu_plugin.guard import HOOK_NAMES, RESULT_TYPES, conforms, guard, passes
from hpu_plugin.loader import (
    DIST_NAME,
    ENTRY_POINT_GROUP,
    ImportBudgetExceeded,
    PluginRecord,
    load_plugin,
    record_for,
)
from hpu_plugin.loader import discover as _discover
from hpu_plugin.reporting import Once
from hpu_plugin.switches import (
    DEFAULT_IMPORT_BUDGET,
    ENV_DISABLE,
    ENV_IMPORT_BUDGET,
    ENV_NO_THIRD_PARTY,
    ENV_ONLY,
    NAME,
    ConfigurationError,
    Selection,
    disable_value,
)

log = logging.getLogger("hpu_plugin")

__all__ = [
    "DEFAULT_IMPORT_BUDGET", "DIST_NAME", "ENTRY_POINT_GROUP", "ENV_DISABLE",
    "ENV_IMPORT_BUDGET", "ENV_NO_THIRD_PARTY", "ENV_ONLY", "HOOK_NAMES", "RESULT_TYPES",
    "ConfigurationError", "PluginRecord", "Registry", "Selection", "conforms",
    "disable_value", "discover", "get_registry",
]


def discover(path: list[str] | None = None) -> list[metadata.EntryPoint]:
    """Every ``hpu_plugin`` entry point on ``path``; an unreadable distribution is logged."""
    return _discover(path, warn=log.warning)


class Registry:
    """The process's plugins and the decisions hosts ask them for."""

    def __init__(self, selection: Selection | None = None) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.selection = selection if selection is not None else Selection.from_environ()
        self.records: dict[str, PluginRecord] = {}
        self._reported = Once()  # (plugin, kind of fault): each logged once per registry
        self._available: bool | None = None
        self._lock = threading.Lock()

    # -- loading ---------------------------------------------------------------------------

    def load_entry_points(self, entry_points: Iterable[metadata.EntryPoint] | None = None) -> None:
        """Register every plugin of the ``hpu_plugin`` group that the switches allow.

        First-party plugins claim their names before third-party ones, so a third party
        that reuses a first-party name is the one refused; then plugins are registered in
        the fixed order the module docstring explains.
        """
        if entry_points is None:
            entry_points = discover()
        pairs = [(ep, record_for(ep)) for ep in entry_points]
        pairs.sort(key=lambda pair: (not pair[1].first_party, pair[1].name, pair[1].distribution))
        accepted = [(ep, record) for ep, record in pairs if self._admit(record)]
        self._warn_unknown_names()
        third = sorted((p for p in accepted if not p[1].first_party), key=lambda p: p[1].name)
        first = sorted((p for p in accepted if p[1].first_party), key=lambda p: p[1].name)
        for ep, record in [*reversed(third), *reversed(first)]:
            plugin = self._load(ep, record)
            if plugin is not None:
                self.register(plugin, record)

    def _admit(self, record: PluginRecord) -> bool:
        """Record one entry point; may it load? A switch is asked first, so a plugin the
        user turned off shows as disabled even when it could not have loaded anyway."""
        duplicate = self.records.get(record.name)
        key = record.name if duplicate is None else f"{record.name} [{record.distribution}]"
        self.records[key] = record
        refusal = self.selection.refuses(record)
        if refusal:
            record.status, record.reason = "disabled", refusal
            return False
        if duplicate is not None:
            record.status = "failed"
            record.reason = (
                f"duplicate plugin name: {duplicate.distribution} {duplicate.version} already "
                f"provides {record.name!r}"
            )
            self._report(record, "duplicate", record.reason + "; skipped. Turn this one off "
                         f"with {ENV_DISABLE}={disable_value(record)}")
            return False
        if not NAME.match(record.name):
            record.status = "failed"
            record.reason = (
                f"entry-point name {record.name!r} cannot be named in {ENV_DISABLE}: "
                "use letters, digits, '_', '-', '.' and '+' only"
            )
            self._report(record, "name", record.reason + "; skipped")
            return False
        return True

    def _warn_unknown_names(self) -> None:
        """A switch naming no installed plugin is a likely typo: say so, do not fail."""
        known = sorted({r.name for r in self.records.values()})
        for variable, unknown in self.selection.unknown(list(self.records.values())).items():
            log.warning(
                "hpu_plugin: %s names %s, which no installed plugin is called; installed "
                "plugins: %s", variable, ", ".join(map(repr, unknown)),
                ", ".join(known) or "none",
            )

    def _load(self, ep: metadata.EntryPoint, record: PluginRecord) -> object | None:
        """Import one plugin within the import budget; ``None`` (reported) when it failed."""
        budget = self.selection.import_budget
        start = time.perf_counter()
        try:
            plugin, record.import_seconds = load_plugin(ep, budget)
        except ImportBudgetExceeded:
            record.import_seconds = time.perf_counter() - start
            record.status = "failed"
            record.reason = (f"import did not finish within the {budget:g} s budget "
                             f"({ENV_IMPORT_BUDGET}) and was cut off")
            self._report(record, "slow", record.reason + f"; skipped. Disable it with "
                         f"{ENV_DISABLE}={disable_value(record)}, or raise {ENV_IMPORT_BUDGET}")
            return None
        except BaseException as exc:  # a broken plugin must not break the program
            if isinstance(exc, KeyboardInterrupt):
                raise
            record.import_seconds = time.perf_counter() - start
            record.status, record.reason = "failed", f"import failed: {exc!r}"
            self._report(record, "import", f"failed to import: {exc!r}; skipped", exc)
            return None
        return plugin

    def register(self, plugin: object, record: PluginRecord) -> None:
        """Register ``plugin`` behind a guard that isolates each of its hook functions.

        ``plugin`` is a module, a class (static and class methods) or an instance. pluggy
        sees a namespace of guarded functions that carry the plugin's own hookimpl options
        and signatures, so ordering and argument selection are pluggy's own.
        """
        self.records.setdefault(record.name, record)
        guarded = types.SimpleNamespace()
        hooks: list[str] = []
        report = functools.partial(self._report, record)
        for attr, function, opts in _hook_functions(plugin):
            hook = opts.get("specname") or attr
            if hook not in HOOK_NAMES and not opts.get("optionalhook"):
                record.status = "failed"
                record.reason = f"implements {hook!r}, which no hpu_plugin hook spec declares"
                self._report(record, "register", record.reason + "; skipped")
                return
            setattr(guarded, attr, guard(hook, function, opts, report))
            hooks.append(hook)
        try:
            self.pm.register(guarded, name=record.name)
        except Exception as exc:  # e.g. an argument name the spec does not have
            record.status, record.reason = "failed", f"rejected by pluggy: {exc}"
            self._report(record, "register", record.reason + "; skipped", exc)
            return
        record.hooks = hooks

    def _report(
        self, record: PluginRecord, kind: str, message: str, exc: BaseException | None = None
    ) -> None:
        """Log a fault once per plugin and kind; keep it on the record for the CLI.

        A registered plugin with a fault shows as ``faulted``: it is still asked (a fault
        may depend on the input), but a listing must not call it plainly enabled.
        """
        if not self._reported.first((record.name + "\0" + record.distribution, kind)):
            return
        if ENV_DISABLE + "=" not in message:  # every report says how to turn it off
            message += f" (turn it off with {ENV_DISABLE}={disable_value(record)})"
        log.warning(
            "hpu_plugin: plugin %r (%s %s) %s", record.name, record.distribution,
            record.version, message,
        )
        if exc is not None:
            log.debug("hpu_plugin: traceback of plugin %r", record.name,
                      exc_info=(type(exc), exc, exc.__traceback__))
        if record.status in ("enabled", "faulted"):
            record.faults.append(message)
            if record.status == "enabled" and self.pm.has_plugin(record.name):
                record.status = "faulted"
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

    def ddp_backend(self, requested: str | None, device_type: str) -> str | None:
        result: str | None = self.pm.hook.hpu_ddp_backend(
            requested=requested, device_type=device_type
        )
        return result

    def job_facts(self, environ: Mapping[str, str]) -> dict[str, str]:
        """Every plugin's ``hpu_job_facts``, with the plugin version and the enabled plugins
        (the registry's own knowledge), for the pre-flight check across ranks."""
        from hpu_plugin import __version__

        facts = {
            "hpu-plugin version": __version__,
            "enabled plugins": ",".join(sorted(n for n, _ in self.pm.list_name_plugin() if n)),
        }
        for part in reversed(self.pm.hook.hpu_job_facts(environ=environ)):
            facts.update(part or {})
        return facts

    def quantization_device_map(
        self,
        method: str,
        bits: int,
        device_map: hookspecs.DeviceMap | None,
        device_type: str,
        options: Mapping[str, Any] | None = None,
    ) -> hookspecs.DeviceMap | None:
        result: hookspecs.DeviceMap | None = self.pm.hook.hpu_quantization_device_map(
            method=method, bits=bits, device_map=device_map, device_type=device_type,
            options=dict(options or {}),
        )
        return result

    def shape_buckets(
        self, kind: str, device_type: str, limit: int | None
    ) -> tuple[int, ...] | None:
        result: tuple[int, ...] | None = self.pm.hook.hpu_shape_buckets(
            kind=kind, device_type=device_type, limit=limit
        )
        return result

    def fast_path(self, name: str, device_type: str, context: Mapping[str, Any]) -> bool:
        """Take Gaudi's fast path ``name``? Nobody's opinion means no."""
        result: bool | None = self.pm.hook.hpu_fast_path(
            name=name, device_type=device_type, context=dict(context)
        )
        return bool(result)

    # -- introspection ---------------------------------------------------------------------

    def call_order(self, hook: str) -> list[str]:
        """Plugin names in the order pluggy enters them (first asked first).

        Wrappers come first (they are entered before, and left after, everything else),
        then ``tryfirst``, plain and ``trylast`` implementations.
        """
        return [name for name, _ in self.call_order_detail(hook)]

    def call_order_detail(self, hook: str) -> list[tuple[str, str]]:
        """``(plugin name, kind)`` pairs in call order; kind is ``wrapper``, ``hookwrapper``,
        ``tryfirst``, ``plain`` or ``trylast``."""
        caller = getattr(self.pm.hook, hook)
        order = []
        for impl in reversed(caller.get_hookimpls()):
            if impl.hookwrapper:
                kind = "hookwrapper"
            elif impl.wrapper:
                kind = "wrapper"
            elif impl.tryfirst:
                kind = "tryfirst"
            elif impl.trylast:
                kind = "trylast"
            else:
                kind = "plain"
            order.append((impl.plugin_name, kind))
        return order


def _hook_functions(plugin: object) -> Iterable[tuple[str, Callable[..., Any], Mapping[str, Any]]]:
    """``(attribute, function, hookimpl options)`` of each hook implementation of ``plugin``.

    Never runs a plugin's properties to look for hooks (as pluggy); an attribute that
    raises on access is no hook, whatever it raises short of KeyboardInterrupt.
    """
    for attr in dir(plugin):
        if isinstance(inspect.getattr_static(plugin, attr, None),
                      (property, functools.cached_property)):
            continue
        try:
            function = getattr(plugin, attr, None)
            opts = getattr(function, hookspecs.PROJECT + "_impl", None) if callable(
                function) else None
        except BaseException as exc:
            if passes(exc):
                raise
            continue
        if isinstance(opts, dict) and function is not None:
            yield attr, function, opts


_registry: Registry | None = None
_registry_lock = threading.Lock()


def get_registry() -> Registry:
    """The process's registry, built and loaded on first use.

    Raises :class:`ConfigurationError` when a switch holds a bad value; nothing is cached
    then, so a corrected environment is read on the next call.
    """
    global _registry
    if _registry is None:
        with _registry_lock:
            if _registry is None:
                registry = Registry()
                registry.load_entry_points()
                _registry = registry
    return _registry

