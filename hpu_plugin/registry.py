"""One PluginManager for the process: loads plugins, guards them, answers the hosts.

Plugins come from the ``hpu_plugin`` entry-point group only; the first-party plugins are
declared there by this package's own ``pyproject.toml``, so they load, order and disable
exactly like a third party's. Which may load is :mod:`.switches`, finding and importing
them :mod:`.loader`, and every hook function runs behind :mod:`.guard`.

Order: pluggy asks the plugin registered *last* first among equals, and entry points come
in no reliable order, so third-party plugins are registered first, in descending name order,
then the first-party ones. Among plain implementations the first-party plugin is asked
first, third-party ones after it by ascending name.

A plugin that fails at import, or whose hook faults, is reported once per kind of fault,
naming it, its distribution and version and the ``HPU_PLUGIN_DISABLE`` value that turns it
off; the program goes on.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
import threading
import time
import types
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from importlib import metadata
from typing import Any

import pluggy

from hpu_plugin import hookspecs
from hpu_plugin.guard import HOOK_NAMES, describe, guard, passes
from hpu_plugin.loader import PluginRecord, load_plugin, record_for
from hpu_plugin.loader import discover as _discover
from hpu_plugin.patching import this_process
from hpu_plugin.reporting import Once
from hpu_plugin.switches import ENV_DISABLE, ENV_IMPORT_BUDGET, NAME, Selection, disable_value

log = logging.getLogger("hpu_plugin")

def discover(path: list[str] | None = None) -> list[metadata.EntryPoint]:
    """Every ``hpu_plugin`` entry point on ``path``; an unreadable distribution is logged."""
    return _discover(path, warn=log.warning)


class _Hooks(types.SimpleNamespace):
    """A plugin's guarded hook functions, as pluggy sees them. Compared by identity: two
    plugins without hooks are two plugins, not one registered twice."""

    __eq__ = object.__eq__
    __hash__ = object.__hash__


class Registry:
    """The process's plugins and the decisions hosts ask them for."""

    def __init__(self, selection: Selection | None = None) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.selection = selection if selection is not None else Selection.from_environ()
        self.records: dict[str, PluginRecord] = {}
        self._reported = Once()  # (plugin, kind of fault)
        self._available: bool | None = None
        self._lock = threading.Lock()
        if self.selection.trace:
            self.pm.trace.root.setwriter(_write_trace)
            self.pm.enable_tracing()

    def load_entry_points(self, entry_points: Iterable[metadata.EntryPoint] | None = None) -> None:
        """Register every plugin of the group the switches allow. First-party plugins claim
        their names first, so a third party reusing one is the one refused."""
        pairs = sorted(((ep, record_for(ep)) for ep in (
            discover() if entry_points is None else entry_points)),
            key=lambda p: (not p[1].first_party, p[1].name, p[1].distribution))
        accepted = [pair for pair in pairs if self._admit(pair[1])]
        known = sorted({r.name for r in self.records.values()})
        for variable, unknown in self.selection.unknown(list(self.records.values())).items():
            log.warning("hpu_plugin: %s names %s, which no installed plugin is called; "
                        "installed plugins: %s", variable, ", ".join(map(describe, unknown)),
                        ", ".join(known) or "none")
        loaded: dict[int, tuple[object, PluginRecord]] = {}  # by id: one module, two names
        for ep, record in accepted:
            plugin = self._load(ep, record)
            if plugin is not None and id(plugin) in loaded:
                record.status = "failed"
                record.reason = f"the same plugin as {loaded[id(plugin)][1].name!r}, loaded once"
                self._report(record, "twice", record.reason + "; remove one of the two "
                             "entry points")
            elif plugin is not None:
                loaded[id(plugin)] = (plugin, record)
        for plugin, record in sorted(loaded.values(), key=_registration_order, reverse=True):
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
            why = (f"duplicate plugin name: {duplicate.distribution} {duplicate.version} "
                   f"already provides {record.name!r}")
        elif not NAME.match(record.name):
            why = (f"entry-point name {record.name!r} cannot be named in {ENV_DISABLE}: use "
                   "letters, digits, '_', '-', '.' and '+' only")
        else:
            return True
        record.status, record.reason = "failed", why
        self._report(record, "admit", why + "; skipped")
        return False

    def _load(self, ep: metadata.EntryPoint, record: PluginRecord) -> object | None:
        """Import one plugin, timed; ``None`` (reported) when it failed. A third-party import
        still running after the budget is reported while it runs: ``import torch`` waits for
        it, and it cannot be interrupted safely (see :mod:`.loader`)."""
        start, before = time.perf_counter(), set(threading.enumerate())
        budget, fired = self.selection.import_budget, []

        def still_importing() -> None:
            self._report(record, "slow", (
                f"is still importing after {budget:g} s, more than {ENV_IMPORT_BUDGET}="
                f"{budget:g}; `import torch` waits for it, and every `import torch` pays it; "
                "if it never returns, stop the program and skip it, or run `hpu-plugin "
                "doctor` to check every plugin's import"))
            fired.extend(record.faults[-1:])

        watch = None if record.first_party else threading.Timer(budget, still_importing)
        if watch is not None:
            watch.daemon, watch.name = True, "hpu_plugin import watch"
            watch.start()
        try:
            plugin, record.import_seconds = load_plugin(ep)
        except BaseException as exc:  # a broken plugin must not break the program
            if isinstance(exc, KeyboardInterrupt):
                raise
            record.import_seconds = time.perf_counter() - start
            record.status, record.reason = "failed", f"import failed: {describe(exc)}"
            self._report(record, "import", record.reason + "; skipped", exc)
            return None
        finally:
            if watch is not None:  # a report being written as the import ends is finished
                watch.cancel()
                watch.join()
        threads = [t.name for t in threading.enumerate() if t not in before and not t.daemon]
        if threads:
            self._report(record, "thread", f"left the non-daemon thread(s) {describe(threads)} "
                         "running after its import: the program cannot exit while they run")
        if record.import_seconds > budget:
            slow = (f"took {record.import_seconds:.1f} s to import, more than "
                    f"{ENV_IMPORT_BUDGET}={budget:g}; every `import torch` pays it")
            if fired and fired[0] in record.faults:  # said while it ran: not said again
                record.faults[record.faults.index(fired[0])] = slow
                record.reason = slow if record.reason == fired[0] else record.reason
            else:
                self._report(record, "slow", slow)
        return plugin

    def register(self, plugin: object, record: PluginRecord) -> None:
        """Register ``plugin`` (a module, a class or an instance) behind the guard. pluggy
        sees a namespace of guarded functions carrying the plugin's own hookimpl options and
        signatures, so ordering and argument selection are pluggy's own."""
        self.records.setdefault(record.name, record)
        guarded, hooks = _Hooks(), []
        report = functools.partial(self._report, record)
        for attr, function, opts in _hook_functions(plugin):
            hook = opts.get("specname") or attr
            problem = (f"implements {hook!r}, which no hpu_plugin hook spec declares"
                       if hook not in HOOK_NAMES and not opts.get("optionalhook") else
                       f"implements {hook!r} as an old-style hookwrapper; write "
                       "@hookimpl(wrapper=True)" if opts.get("hookwrapper") else "")
            if problem:
                record.status, record.reason = "failed", problem
                self._report(record, "register", problem + "; skipped")
                return
            setattr(guarded, attr, guard(hook, function, opts, report))
            hooks.append(hook)
        try:
            self.pm.register(guarded, name=record.name)
        except Exception as exc:  # e.g. an argument name the spec does not have
            fix = ("; fix: remove the parameter the hook spec lacks (the specs and their "
                   "arguments are in hpu_plugin.hookspecs)"
                   if isinstance(exc, pluggy.PluginValidationError) else "")
            record.status, record.reason = "failed", f"rejected by pluggy: {describe(exc)}{fix}"
            self._report(record, "register", record.reason + "; skipped")
            return
        record.hooks = list(dict.fromkeys(hooks))  # a wrapper and its own plain one: once

    def _report(self, record: PluginRecord, kind: str, message: str,
                exc: BaseException | None = None) -> None:
        """Log a fault once per plugin and kind, with the fix; keep it on the record."""
        if not self._reported.first((record.name + "\0" + record.distribution, kind)):
            return
        fix = disable_value(record)
        message += f" (turn it off with {ENV_DISABLE}={fix})" if fix else ""
        log.warning("hpu_plugin: plugin %r (%s %s) %s", record.name, record.distribution,
                    record.version, message)
        if exc is not None:
            log.debug("hpu_plugin: traceback of plugin %r", record.name,
                      exc_info=(type(exc), exc, exc.__traceback__))
        if record.status in ("enabled", "faulted"):
            record.faults.append(message)
            record.status = "faulted"
            record.reason = record.reason or message

    # -- decisions: what the hosts ask -----------------------------------------------------

    def prepare_environment(self, environ: MutableMapping[str, str]) -> None:
        self.pm.hook.hpu_prepare_environment(environ=environ)

    def device_available(self) -> bool:
        """Cached for the life of the process, as the hosts cache their own answer."""
        if self._available is None:
            with self._lock:
                if self._available is None:
                    self._available = bool(self.pm.hook.hpu_device_available())
        return self._available

    def device_properties(self) -> hookspecs.DeviceProperties | None:
        return self.pm.hook.hpu_device_properties() if self.device_available() else None

    def compile_backend(
        self, requested: hookspecs.CompileBackend | None
    ) -> hookspecs.CompileBackend | None:
        return self.pm.hook.hpu_compile_backend(requested=requested)

    def ddp_backend(self, requested: str | None) -> str | None:
        """Plugins see the name as torch reads it: ``Backend("NCCL")`` is ``"nccl"``."""
        return self.pm.hook.hpu_ddp_backend(
            requested=None if requested is None else str(requested).lower())

    def job_facts(self, environ: Mapping[str, str]) -> dict[str, str]:
        """Every plugin's ``hpu_job_facts``, with the plugin version and the enabled plugins,
        for the pre-flight check across ranks."""
        from hpu_plugin import __version__

        facts = {"hpu-plugin version": __version__, "enabled plugins": ",".join(
            sorted(n for n, _ in self.pm.list_name_plugin() if n))}
        for part in reversed(self.pm.hook.hpu_job_facts(environ=environ)):
            facts.update(part or {})
        return facts

    def quantization_device_map(
        self, method: str, bits: int, device_map: hookspecs.DeviceMap | None,
        options: Mapping[str, Any] | None = None,
    ) -> hookspecs.DeviceMap | None:
        return self.pm.hook.hpu_quantization_device_map(
            method=method, bits=bits, device_map=device_map, options=dict(options or {}))

    def shape_buckets(self, kind: str, limit: int | None) -> tuple[int, ...] | None:
        return self.pm.hook.hpu_shape_buckets(kind=kind, limit=limit)

    def fast_path(self, name: str, context: Mapping[str, Any]) -> bool:
        """Take Gaudi's fast path ``name``? Nobody's opinion means no."""
        return bool(self.pm.hook.hpu_fast_path(name=name, context=dict(context)))

    # -- introspection ---------------------------------------------------------------------

    def call_order(self, hook: str) -> list[str]:
        """Plugin names in the order pluggy enters them (first asked first)."""
        return [name for name, _ in self.call_order_detail(hook)]

    def call_order_detail(self, hook: str) -> list[tuple[str, str]]:
        """``(plugin name, kind)`` in call order: wrappers (entered first, left last), then
        ``tryfirst``, ``plain`` and ``trylast`` implementations."""
        return [(impl.plugin_name, next((k for k in ("wrapper", "tryfirst", "trylast")
                                          if getattr(impl, k)), "plain"))
                for impl in reversed(getattr(self.pm.hook, hook).get_hookimpls())]


def _write_trace(text: str) -> None:
    """pluggy's trace lines go to stderr as they come: a trace is read while the program
    runs, and logging's configuration is the user's."""
    sys.stderr.write("".join(f"hpu_plugin trace:{line}" if line.strip() else line
                             for line in text.splitlines(keepends=True)))
    sys.stderr.flush()


def _registration_order(pair: tuple[object, PluginRecord]) -> tuple[int, str]:
    """pluggy asks the last registered first within each kind (``tryfirst``, plain,
    ``trylast``). First-party plugins are registered after third parties, so they decide
    before a third party's plain implementation; a first-party plugin with a ``tryfirst``
    implementation is registered before them, so a third party's ``tryfirst`` still comes
    first. Sorted in reverse: equals are asked in ascending name order."""
    plugin, record = pair
    early = record.first_party and any(opts.get("tryfirst") for _, _, opts in
                                       _hook_functions(plugin))
    return -(0 if early else 2 if record.first_party else 1), record.name


def _hook_functions(plugin: object) -> Iterable[tuple[str, Callable[..., Any], Mapping[str, Any]]]:
    """``(attribute, function, hookimpl options)`` of each hook implementation of ``plugin``.
    As pluggy, never runs a property to look for hooks; an attribute that raises on access
    is no hook."""
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


_building = threading.local()


def get_registry() -> Registry:
    """The process's registry (held by ``patching.this_process``), built and loaded on first
    use. A bad switch raises :class:`SettingError` and nothing is kept, so a corrected
    environment is read on the next call. A plugin whose import starts ``import torch``
    while the registry is built outside it reaches here again: refused with the fix, rather
    than waiting on the lock for ever."""
    if this_process.registry is not None:
        return this_process.registry
    with this_process.lock:
        if this_process.registry is None:
            if getattr(_building, "on", False):
                raise RuntimeError(
                    "a plugin's import started `import torch` while the plugin registry was "
                    "being built outside it; import torch before asking for the registry")
            _building.on = True
            try:
                registry = Registry()
                registry.load_entry_points()
            finally:
                _building.on = False
            this_process.registry = registry
        return this_process.registry
