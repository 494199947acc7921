"""One PluginManager for the process: loads plugins, isolates their faults, answers hosts.

Plugins come from the ``hpu_plugin`` entry-point group only; the four first-party plugins
are declared there by this package's own ``pyproject.toml``, so they load, order and
disable exactly like a third party's. Switches (read once, when the registry is built;
a value we cannot use raises :class:`ConfigurationError`, which activation logs):

``HPU_PLUGIN_DISABLE=name,...``    skip these plugins, as pytest's ``-p no:name``
                                   (``HPU_PLUGIN_DISABLE=1`` turns the whole package off)
``HPU_PLUGIN_ONLY=name,...``       load only these plugins (first-party ones included)
``HPU_PLUGIN_NO_THIRD_PARTY=1``    load no entry point outside this distribution
``HPU_PLUGIN_IMPORT_BUDGET=secs``  a plugin whose import takes longer is skipped (default 2)

Names are entry-point names, as ``hpu-plugin plugins`` lists them.

Order. pluggy asks ``tryfirst`` implementations, then plain ones, then ``trylast`` ones,
with wrappers around them all; among equals it asks the plugin registered *last* first.
Entry-point iteration order is not something to build on, so the registry fixes it:
third-party plugins are registered first, in descending name order, then the first-party
ones. Hence among plain implementations the first-party plugin is asked first, and
third-party ones after it in ascending name order; a third party takes precedence only by
asking for it (``tryfirst=True`` or a wrapper) and becomes a fallback with ``trylast=True``.

Faults. A plugin that fails at import, is slow at import, raises in a hook or returns a
value the hook spec does not declare is reported once per kind of fault (name,
distribution, version, exception) and skipped; the decision falls to the next
implementation and the program goes on. Only :class:`hookspecs.Refusal` crosses the guard:
it is a plugin's deliberate answer to the user, not a fault.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import math
import os
import re
import threading
import time
import types
import typing
from collections.abc import Callable, Generator, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import pluggy

from hpu_plugin import hookspecs

log = logging.getLogger("hpu_plugin")

DIST_NAME = "hpu-plugin"
ENTRY_POINT_GROUP = hookspecs.PROJECT

ENV_DISABLE = "HPU_PLUGIN_DISABLE"
ENV_ONLY = "HPU_PLUGIN_ONLY"
ENV_NO_THIRD_PARTY = "HPU_PLUGIN_NO_THIRD_PARTY"
ENV_IMPORT_BUDGET = "HPU_PLUGIN_IMPORT_BUDGET"
#: Seconds a plugin may spend being imported. Its import runs inside ``import torch``, so a
#: plugin over budget costs every program that time once; it is skipped so that a report
#: points at it and the user can disable it, rather than it going on unnoticed.
DEFAULT_IMPORT_BUDGET = 2.0

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}
#: Characters an entry-point name may have if a comma-separated switch is to name it.
_NAME = re.compile(r"^[\w.+-]+$")


def _spec_result_types() -> dict[str, Any]:
    """The declared return type of each deciding hook spec, ``None`` taken out.

    Read from the specs' own annotations, so a spec that changes its return type changes
    what the registry accepts, with no second list to keep in step.
    """
    declared: dict[str, Any] = {}
    for name, spec in inspect.getmembers(hookspecs, inspect.isfunction):
        if getattr(spec, hookspecs.PROJECT + "_spec", None) is None:
            continue
        returned = typing.get_type_hints(spec).get("return", type(None))
        options = [arg for arg in _union_args(returned) if arg is not type(None)]
        if not options:
            continue  # returns None: the result is ignored, as the spec says
        declared[name] = options[0] if len(options) == 1 else typing.Union[tuple(options)]  # noqa: UP007
    return declared


def _union_args(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        flat: list[Any] = []
        for arg in typing.get_args(annotation):
            flat.extend(_union_args(arg))
        return tuple(flat)
    return (annotation,)


def conforms(value: object, annotation: Any) -> bool:
    """Does ``value`` have the type ``annotation`` declares?

    Checks what can be checked at run time: classes, unions, ``Callable``, the container
    type of a generic (not its items) and, for a dataclass, the types of its fields, so a
    ``DeviceProperties`` with ``count="2"`` is refused like a wrong class would be.
    """
    if annotation is Any or annotation is object:
        return True
    if annotation is None or annotation is type(None):
        return value is None
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(conforms(value, arg) for arg in typing.get_args(annotation))
    if origin is not None:
        if origin is typing.Literal:
            return value in typing.get_args(annotation)
        if origin is Callable or origin is typing.Callable:  # type: ignore[comparison-overlap]
            return callable(value)
        return isinstance(value, origin)
    if annotation is Callable:
        return callable(value)
    if not isinstance(annotation, type) or not isinstance(value, annotation):
        return False
    if annotation is int and isinstance(value, bool):
        return True  # bool is an int in Python; a spec wanting exactly int would say so
    if dataclasses.is_dataclass(annotation):
        hints = typing.get_type_hints(annotation)
        return all(
            conforms(getattr(value, f.name, None), hints.get(f.name, Any))
            for f in dataclasses.fields(annotation)
        )
    return True


#: What a deciding hook may return besides ``None`` (the spec's return annotation);
#: anything else is a plugin fault. Hooks whose result is ignored are not listed.
RESULT_TYPES: Mapping[str, Any] = types.MappingProxyType(_spec_result_types())
#: Every hook a plugin may implement.
HOOK_NAMES: frozenset[str] = frozenset(
    name
    for name, spec in inspect.getmembers(hookspecs, inspect.isfunction)
    if getattr(spec, hookspecs.PROJECT + "_spec", None) is not None
)


class ConfigurationError(ValueError):
    """A switch of ours holds a value we cannot use; the message names it and the fix."""


def _names(environ: Mapping[str, str], variable: str) -> frozenset[str]:
    raw = environ.get(variable, "")
    if raw.strip().lower() in _FALSE:
        return frozenset()
    names = [part.strip() for part in raw.split(",") if part.strip()]
    for name in names:
        if name.lower() in _TRUE:
            raise ConfigurationError(
                f"{variable}={raw!r} mixes the switch {name!r} with plugin names: set "
                f"{variable}=1 alone to turn hpu-plugin off, or list only plugin names "
                "(as `hpu-plugin plugins` shows them), separated by commas."
                if variable == ENV_DISABLE
                else f"{variable}={raw!r} contains {name!r}, which is a switch value, not a "
                "plugin name: list plugin names (as `hpu-plugin plugins` shows them), "
                "separated by commas, or unset it."
            )
        if not _NAME.match(name):
            raise ConfigurationError(
                f"{variable}={raw!r}: {name!r} cannot be a plugin name (letters, digits, "
                "'_', '-', '.' and '+' only): list plugin names as `hpu-plugin plugins` "
                "shows them, separated by commas."
            )
    if not names:
        raise ConfigurationError(
            f"{variable}={raw!r} names no plugin: list plugin names (as `hpu-plugin "
            f"plugins` shows them) separated by commas, or unset {variable}."
        )
    return frozenset(names)


def _import_budget(environ: Mapping[str, str]) -> float:
    raw = environ.get(ENV_IMPORT_BUDGET, "").strip()
    if not raw:
        return DEFAULT_IMPORT_BUDGET
    try:
        budget = float(raw)
    except ValueError:
        budget = math.nan
    if not math.isfinite(budget) or budget <= 0:
        raise ConfigurationError(
            f"{ENV_IMPORT_BUDGET}={environ[ENV_IMPORT_BUDGET]!r} is not a positive number of "
            f"seconds: set it to e.g. 2 or 0.5, or unset it for the default of "
            f"{DEFAULT_IMPORT_BUDGET:g} s."
        )
    return budget


@dataclass(frozen=True)
class Selection:
    """Which plugins may load, from the environment switches."""

    disabled: frozenset[str] = frozenset()
    only: frozenset[str] | None = None
    third_party: bool = True
    import_budget: float = DEFAULT_IMPORT_BUDGET
    #: ``HPU_PLUGIN_DISABLE=1``: activation never builds a registry; one built anyway
    #: (``hpu-plugin plugins``) shows every plugin disabled rather than pretending.
    package_off: bool = False

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> Selection:
        """Read and validate every switch; raise :class:`ConfigurationError` on a bad one."""
        disable_raw = environ.get(ENV_DISABLE, "").strip().lower()
        package_off = disable_raw in _TRUE
        disabled = frozenset() if package_off else _names(environ, ENV_DISABLE)
        only = _names(environ, ENV_ONLY) if ENV_ONLY in environ else None
        if only is not None and not only:
            only = None  # HPU_PLUGIN_ONLY=0 / off / empty: no allowlist
        no_third = environ.get(ENV_NO_THIRD_PARTY, "").strip().lower()
        if no_third not in _TRUE | _FALSE:
            raise ConfigurationError(
                f"{ENV_NO_THIRD_PARTY}={environ[ENV_NO_THIRD_PARTY]!r} is not a switch: set it "
                "to 1 to load no third-party plugins, or to 0 (or unset it) to load them."
            )
        return cls(
            disabled=disabled,
            only=only,
            third_party=no_third not in _TRUE,
            import_budget=_import_budget(environ),
            package_off=package_off,
        )

    def refuses(self, name: str, first_party: bool) -> str | None:
        """Why ``name`` must not load, or ``None`` when it may."""
        if self.package_off:
            return f"{ENV_DISABLE}=1 turns hpu-plugin off"
        if name in self.disabled:
            return f"disabled by {ENV_DISABLE}"
        if self.only is not None and name not in self.only:
            return f"not in {ENV_ONLY}"
        if not first_party and not self.third_party:
            return f"third-party plugins off ({ENV_NO_THIRD_PARTY})"
        return None


@dataclass
class PluginRecord:
    """One entry point as ``hpu-plugin plugins`` shows it.

    ``status`` is ``enabled`` (registered), ``disabled`` (a switch kept it out) or
    ``failed`` (it could not be used; ``reason`` says why). A registered plugin whose hook
    faulted stays ``enabled`` and keeps being asked, since a fault may depend on the
    input; each fault is in ``faults`` and the first one is its ``reason``.
    """

    name: str
    value: str
    distribution: str
    version: str
    first_party: bool
    status: str = "enabled"  # enabled | disabled | failed
    reason: str = ""
    hooks: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    import_seconds: float | None = None


def discover(path: list[str] | None = None) -> list[metadata.EntryPoint]:
    """Every ``hpu_plugin`` entry point installed on ``path`` (default ``sys.path``).

    ``metadata.entry_points()`` raises for all when one distribution anywhere has a
    malformed ``entry_points.txt``; read distribution by distribution instead, so such a
    one is reported and the others load. The first distribution of a name on the path
    wins, as with ``metadata.entry_points()``.
    """
    seen: set[str] = set()
    found: list[metadata.EntryPoint] = []
    distributions = metadata.distributions() if path is None else metadata.distributions(path=path)
    for dist in distributions:
        try:
            name = getattr(dist, "_normalized_name", None) or dist.metadata["Name"] or ""
            name = _normalise(name)
            if name in seen:
                continue
            seen.add(name)
            found.extend(ep for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP)
        except Exception as exc:  # one broken installation must not hide every plugin
            where = getattr(dist, "_path", None) or "an installed distribution"
            log.warning(
                "hpu_plugin: cannot read the entry points of %s (%r); its plugins, if any, "
                "are skipped. Reinstall or remove that distribution.", where, exc,
            )
    return found


def _normalise(dist_name: str) -> str:
    return re.sub(r"[-_.]+", "-", dist_name).lower()


def _record_for(ep: metadata.EntryPoint) -> PluginRecord:
    dist = getattr(ep, "dist", None)
    dist_name = dist.name if dist is not None else "?"
    if dist is not None:
        first_party = _normalise(dist_name) == DIST_NAME
    else:  # an entry point handed in without its distribution (tests, embedders)
        first_party = ep.value.startswith("hpu_plugin.")
    return PluginRecord(
        name=ep.name,
        value=ep.value,
        distribution=dist_name,
        version=dist.version if dist is not None else "?",
        first_party=first_party,
    )


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
        """Register every plugin of the ``hpu_plugin`` group that the switches allow.

        First-party plugins claim their names before third-party ones, so a third party
        that reuses a first-party name is the one refused; then plugins are registered in
        the fixed order the module docstring explains.
        """
        if entry_points is None:
            entry_points = discover()
        pairs = [(ep, _record_for(ep)) for ep in entry_points]
        pairs.sort(key=lambda pair: (not pair[1].first_party, pair[1].name, pair[1].distribution))
        accepted: list[tuple[metadata.EntryPoint, PluginRecord]] = []
        for ep, record in pairs:
            if record.name in self.records:
                other = self.records[record.name]
                record.status = "failed"
                record.reason = (
                    f"duplicate plugin name: {other.distribution} {other.version} already "
                    f"provides {record.name!r}"
                )
                self.records[f"{record.name} [{record.distribution}]"] = record
                self._report(record, "duplicate", record.reason + "; skipped")
                continue
            self.records[record.name] = record
            if not _NAME.match(record.name):
                record.status = "failed"
                record.reason = (
                    f"entry-point name {record.name!r} cannot be named in {ENV_DISABLE}: "
                    "use letters, digits, '_', '-', '.' and '+' only"
                )
                self._report(record, "name", record.reason + "; skipped")
                continue
            refusal = self.selection.refuses(record.name, record.first_party)
            if refusal:
                record.status, record.reason = "disabled", refusal
                continue
            accepted.append((ep, record))
        self._warn_unknown_names()
        third = sorted((p for p in accepted if not p[1].first_party), key=lambda p: p[1].name)
        first = sorted((p for p in accepted if p[1].first_party), key=lambda p: p[1].name)
        for ep, record in [*reversed(third), *reversed(first)]:
            plugin = self._load(ep, record)
            if plugin is not None:
                self.register(plugin, record)

    def _warn_unknown_names(self) -> None:
        """A switch naming no installed plugin is a likely typo: say so, do not fail."""
        known = sorted({r.name for r in self.records.values()})
        for variable, names in ((ENV_DISABLE, self.selection.disabled),
                                (ENV_ONLY, self.selection.only or frozenset())):
            unknown = sorted(names - set(known))
            if unknown:
                log.warning(
                    "hpu_plugin: %s names %s, which no installed plugin is called; installed "
                    "plugins: %s", variable, ", ".join(map(repr, unknown)),
                    ", ".join(known) or "none",
                )

    def _load(self, ep: metadata.EntryPoint, record: PluginRecord) -> object | None:
        """Import one plugin, timed; a class is instantiated with no arguments."""
        start = time.perf_counter()
        try:
            plugin = ep.load()
            if inspect.isclass(plugin):
                plugin = plugin()
        except (Exception, SystemExit) as exc:  # a broken plugin must not break the program
            record.status, record.reason = "failed", f"import failed: {exc!r}"
            self._report(record, "import", f"failed to import: {exc!r}; skipped", exc)
            return None
        finally:
            record.import_seconds = time.perf_counter() - start
        budget = self.selection.import_budget
        if record.import_seconds > budget:
            record.status = "failed"
            record.reason = (
                f"import took {record.import_seconds:.2f} s, over the {budget:g} s budget "
                f"({ENV_IMPORT_BUDGET})"
            )
            self._report(
                record, "slow", record.reason + f"; skipped. Disable it with {ENV_DISABLE}="
                f"{record.name}, or raise {ENV_IMPORT_BUDGET}"
            )
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
        for attr in dir(plugin):
            if isinstance(inspect.getattr_static(plugin, attr, None),
                          (property, functools.cached_property)):
                continue  # never run a plugin's properties to look for hooks (as pluggy)
            try:
                function = getattr(plugin, attr, None)
            except Exception:  # a property that raises is no hook
                continue
            if not callable(function):
                continue
            opts = getattr(function, hookspecs.PROJECT + "_impl", None)
            if not isinstance(opts, dict):
                continue
            hook = opts.get("specname") or attr
            if hook not in HOOK_NAMES and not opts.get("optionalhook"):
                record.status = "failed"
                record.reason = f"implements {hook!r}, which no hpu_plugin hook spec declares"
                self._report(record, "register", record.reason + "; skipped")
                return
            setattr(guarded, attr, self._guard(record, hook, function, opts))
            hooks.append(hook)
        try:
            self.pm.register(guarded, name=record.name)
        except Exception as exc:  # e.g. an argument name the spec does not have
            record.status, record.reason = "failed", f"rejected by pluggy: {exc}"
            self._report(record, "register", record.reason + "; skipped", exc)
            return
        record.hooks = hooks

    def _guard(
        self, record: PluginRecord, hook: str, function: Callable[..., Any], opts: Mapping[str, Any]
    ) -> Callable[..., Any]:
        if opts.get("hookwrapper"):
            return self._guard_old_wrapper(record, hook, function)
        if opts.get("wrapper"):
            return self._guard_wrapper(record, hook, function)
        expected = RESULT_TYPES.get(hook)

        @functools.wraps(function)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                result = function(*args, **kwargs)
            except hookspecs.Refusal:
                raise
            except (Exception, SystemExit) as exc:  # sys.exit() in a hook ends no program
                self._report(record, hook, f"raised {exc!r} in {hook}; skipped", exc)
                return None
            if expected is None or result is None or conforms(result, expected):
                return result
            self._report_type(record, hook, result, expected)
            return None

        return guarded

    def _guard_wrapper(
        self, record: PluginRecord, hook: str, function: Callable[..., Any]
    ) -> Callable[..., Any]:
        """A new-style wrapper: faults make it a pass-through; what it returns is checked.

        An exception from the wrapped implementations (a :class:`Refusal`) is thrown into
        the plugin's wrapper, so it can see and handle it as pluggy promises.
        """
        expected = RESULT_TYPES.get(hook)

        @functools.wraps(function)
        def guarded(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            try:
                inner = function(*args, **kwargs)
                next(inner)
            except hookspecs.Refusal:
                raise
            except StopIteration:
                self._report(record, hook, f"wrapper {hook} did not yield; skipped")
                return (yield)
            except Exception as exc:
                self._report(record, hook, f"wrapper {hook} raised {exc!r} before yield; "
                             "skipped", exc)
                return (yield)
            try:
                result = yield
            except Exception as exc:  # the implementations inside raised: let it see that
                handled, value = self._throw_into(record, hook, inner, exc, expected)
                if handled:
                    return value
                raise
            try:
                inner.send(result)
            except StopIteration as stop:
                value = stop.value
                if value is None or expected is None or conforms(value, expected):
                    return value
                self._report_type(record, hook, value, expected)
                return result
            except hookspecs.Refusal:
                raise
            except Exception as exc:
                self._report(record, hook, f"wrapper {hook} raised {exc!r} after yield; "
                             "skipped", exc)
                return result
            inner.close()
            self._report(record, hook, f"wrapper {hook} yielded twice; skipped")
            return result

        return guarded

    def _throw_into(
        self, record: PluginRecord, hook: str, inner: Generator[Any, Any, Any],
        exc: Exception, expected: Any,
    ) -> tuple[bool, Any]:
        """Throw ``exc`` into a plugin's wrapper: ``(True, value)`` when it turned the
        exception into a valid result, ``(False, None)`` when ``exc`` must go on."""
        try:
            inner.throw(exc)
        except StopIteration as stop:
            if stop.value is None or expected is None or conforms(stop.value, expected):
                return True, stop.value
            self._report_type(record, hook, stop.value, expected)
            return False, None
        except hookspecs.Refusal as refusal:
            if refusal is exc:
                return False, None
            raise  # the wrapper's own refusal replaces the one it was given
        except Exception as raised:
            if raised is not exc:
                self._report(record, hook, f"wrapper {hook} raised {raised!r} after yield; "
                             "skipped", raised)
            return False, None
        inner.close()
        self._report(record, hook, f"wrapper {hook} yielded twice; skipped")
        return False, None

    def _guard_old_wrapper(
        self, record: PluginRecord, hook: str, function: Callable[..., Any]
    ) -> Callable[..., Any]:
        """An old-style ``hookwrapper``: it gets pluggy's ``Result``; faults are undone."""
        expected = RESULT_TYPES.get(hook)

        @functools.wraps(function)
        def guarded(*args: Any, **kwargs: Any) -> Generator[None, Any, None]:
            try:
                inner = function(*args, **kwargs)
                next(inner)
            except hookspecs.Refusal:
                raise
            except StopIteration:
                self._report(record, hook, f"hookwrapper {hook} did not yield; skipped")
                yield
                return
            except Exception as exc:
                self._report(record, hook, f"hookwrapper {hook} raised {exc!r} before yield; "
                             "skipped", exc)
                yield
                return
            outcome = yield
            before_exc = outcome.exception
            before = None if before_exc is not None else outcome.get_result()
            try:
                inner.send(outcome)
            except StopIteration:
                pass
            except hookspecs.Refusal as refusal:
                outcome.force_exception(refusal)
                return
            except Exception as exc:
                self._report(record, hook, f"hookwrapper {hook} raised {exc!r} after yield; "
                             "skipped", exc)
                _restore(outcome, before, before_exc)
                return
            else:
                inner.close()
                self._report(record, hook, f"hookwrapper {hook} yielded twice; skipped")
                _restore(outcome, before, before_exc)
                return
            if outcome.exception is None and expected is not None:
                value = outcome.get_result()
                if value is not None and not conforms(value, expected):
                    self._report_type(record, hook, value, expected)
                    _restore(outcome, before, before_exc)

        return guarded

    def _report_type(self, record: PluginRecord, hook: str, value: object, expected: Any) -> None:
        self._report(
            record, hook + ":type",
            f"returned {value!r} ({type(value).__name__}) from {hook}, which the hook spec "
            f"does not allow (expected {_type_name(expected)} or None); skipped",
        )

    def _report(
        self, record: PluginRecord, kind: str, message: str, exc: BaseException | None = None
    ) -> None:
        """Log a fault once per plugin and kind; keep it on the record for the CLI."""
        key = (record.name + "\0" + record.distribution, kind)
        if key in self._reported:
            return
        self._reported.add(key)
        log.warning(
            "hpu_plugin: plugin %r (%s %s) %s", record.name, record.distribution,
            record.version, message,
        )
        if exc is not None:
            log.debug("hpu_plugin: traceback of plugin %r", record.name,
                      exc_info=(type(exc), exc, exc.__traceback__))
        if record.status == "enabled":
            record.faults.append(message)
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
        result: str | None = self.pm.hook.hpu_ddp_backend(
            device_type=device_type, requested=requested
        )
        return result

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


def _restore(outcome: Any, value: object, exc: BaseException | None) -> None:
    if exc is not None:
        outcome.force_exception(exc)
    else:
        outcome.force_result(value)


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "").replace("collections.abc.", "")


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

