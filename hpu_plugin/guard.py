"""The one guard around every hook function of every plugin, of every hook form.

A plugin's fault must never end the user's program: a plain, ``tryfirst`` or ``trylast``
implementation, a new-style ``wrapper`` (before or after its ``yield``) and an old-style
``hookwrapper`` are each wrapped so that anything they raise, short of
:class:`KeyboardInterrupt` (the user's own Ctrl-C), is reported once and undone: a
``SystemExit`` from ``sys.exit()``, a misused ``GeneratorExit``, any other
``BaseException`` subclass. Only :class:`hookspecs.Refusal` crosses the guard: it is a
plugin's deliberate answer to the user, not a fault.

An answer is checked twice: its type against the hook spec's return annotation, and its
meaning against what the host can use (:data:`VALIDATORS`: a device map naming another
device type, a compile backend dynamo does not know). Either failure is reported naming the
plugin, and the decision falls to the next implementation, as if the plugin had said None.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import sys
import types
import typing
from collections.abc import Callable, Generator, Mapping
from typing import Any, Protocol

from hpu_plugin import hookspecs
from hpu_plugin.gaudi.modes import EAGER


class Reporter(Protocol):
    def __call__(self, kind: str, message: str, exc: BaseException | None = None) -> None: ...


def passes(exc: BaseException) -> bool:
    """Must ``exc`` cross the guard? Only the user's interrupt and a plugin's refusal do."""
    return isinstance(exc, (KeyboardInterrupt, hookspecs.Refusal))


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

_DEVICE = re.compile(r"([a-z_]+)(?::([0-9]+))?", re.ASCII)


def _device_map_problem(value: object, call: Mapping[str, Any]) -> str | None:
    """A device map must place modules on the device type asked for, the CPU or disk."""
    device_type = str(call.get("device_type", "hpu"))
    allowed = {device_type, "cpu", "disk", "meta"}
    if isinstance(value, str):
        if value in ("auto", "balanced", "balanced_low_0", "sequential"):
            return None
        entries: list[tuple[str, object]] = [("", value)]
    elif isinstance(value, dict):
        entries = list(value.items())
    else:
        return None
    for key, where in entries:
        if not isinstance(key, str):
            return f"its device map has a key {key!r} that is not a module name"
        if isinstance(where, int) and not isinstance(where, bool) and where >= 0:
            continue
        text = str(where)
        match = _DEVICE.fullmatch(text)
        if match is None or match.group(1) not in allowed:
            return (f"its device map places {key or 'the model'!r} on {where!r}, which is "
                    f"not a {device_type}, cpu or disk device")
    return None


def _compile_backend_problem(value: object, call: Mapping[str, Any]) -> str | None:
    """A backend named by a string must be one Gaudi supports (a fact of
    ``hpu_plugin.gaudi``, registered by the Gaudi software when dynamo loads) or one dynamo
    knows now; otherwise torch.compile fails later in dynamo without naming the plugin."""
    if not isinstance(value, str):
        return None
    if not value:
        return "it named an empty compile backend"
    if value in EAGER.compile_backends:
        return None
    registry = sys.modules.get("torch._dynamo.backends.registry")
    if registry is None:
        try:
            from torch._dynamo.backends import registry
        except Exception:  # no dynamo to ask: the host reports what it cannot compile
            return None
    try:
        registry.lookup_backend(value)
    except Exception:
        return f"it named the compile backend {value!r}, which torch._dynamo does not know"
    return None


#: Checks of an answer's meaning, per hook: the problem in words, or ``None``.
VALIDATORS: Mapping[str, Callable[[object, Mapping[str, Any]], str | None]] = (
    types.MappingProxyType({
        "hpu_quantization_device_map": _device_map_problem,
        "hpu_compile_backend": _compile_backend_problem,
    })
)


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "").replace("collections.abc.", "")


class _Checker:
    """Type and meaning checks of one hook's answers, reporting through ``report``."""

    def __init__(self, hook: str, function: Callable[..., Any], report: Reporter) -> None:
        self.hook, self.report = hook, report
        self.expected = RESULT_TYPES.get(hook)
        self.validate = VALIDATORS.get(hook)
        try:  # pluggy passes the arguments by position, in the implementation's order
            self.names = tuple(inspect.signature(function).parameters)
        except (TypeError, ValueError):
            self.names = ()

    def call(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The hook call's arguments by name, for the meaning checks."""
        return {**dict(zip(self.names, args, strict=False)), **kwargs}

    def accepts(self, value: object, call: Mapping[str, Any]) -> bool:
        if value is None or self.expected is None:
            return True
        if not conforms(value, self.expected):
            self.report(
                self.hook + ":type",
                f"returned {value!r} ({type(value).__name__}) from {self.hook}, which the hook "
                f"spec does not allow (expected {_type_name(self.expected)} or None); skipped",
            )
            return False
        problem = self.validate(value, call) if self.validate is not None else None
        if problem:
            self.report(self.hook + ":value",
                        f"returned {value!r} from {self.hook}: {problem}; refused")
            return False
        return True


def guard(hook: str, function: Callable[..., Any], opts: Mapping[str, Any],
          report: Reporter) -> Callable[..., Any]:
    """``function`` (a plugin's hook implementation) behind the guard for its form."""
    check = _Checker(hook, function, report)
    if opts.get("hookwrapper"):
        return _guard_old_wrapper(check, function)
    if opts.get("wrapper"):
        return _guard_wrapper(check, function)

    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            result = function(*args, **kwargs)
        except BaseException as exc:  # sys.exit() in a hook ends no program
            if passes(exc):
                raise
            report(hook, f"raised {exc!r} in {hook}; skipped", exc)
            return None
        return result if check.accepts(result, check.call(args, kwargs)) else None

    return guarded


def _enter(check: _Checker, function: Callable[..., Any], form: str, args: tuple[Any, ...],
           kwargs: dict[str, Any]) -> Generator[Any, Any, Any] | None:
    """Run a wrapper up to its ``yield``; ``None`` (reported) when it faulted before."""
    try:
        inner = function(*args, **kwargs)
        next(inner)
    except StopIteration:
        check.report(check.hook, f"{form} {check.hook} did not yield; skipped")
        return None
    except BaseException as exc:
        if passes(exc):
            raise
        check.report(check.hook, f"{form} {check.hook} raised {exc!r} before yield; skipped",
                     exc)
        return None
    return inner


def _guard_wrapper(check: _Checker, function: Callable[..., Any]) -> Callable[..., Any]:
    """A new-style wrapper: faults make it a pass-through; what it returns is checked.

    An exception from the wrapped implementations (a :class:`Refusal`) is thrown into
    the plugin's wrapper, so it can see and handle it as pluggy promises.
    """
    hook = check.hook

    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
        inner = _enter(check, function, "wrapper", args, kwargs)
        if inner is None:
            return (yield)
        try:
            result = yield
        except Exception as exc:  # the implementations inside raised: let it see that
            handled, value = _throw_into(check, inner, exc, check.call(args, kwargs))
            if handled:
                return value
            raise
        try:
            inner.send(result)
        except StopIteration as stop:
            accepted = check.accepts(stop.value, check.call(args, kwargs))
            return stop.value if accepted else result
        except BaseException as exc:
            if passes(exc):
                raise
            check.report(hook, f"wrapper {hook} raised {exc!r} after yield; skipped", exc)
            return result
        _close(inner)
        check.report(hook, f"wrapper {hook} yielded twice; skipped")
        return result

    return guarded


def _close(inner: Generator[Any, Any, Any]) -> None:
    """Close a plugin's generator that yielded twice; its cleanup may fault too."""
    try:
        inner.close()
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise


def _throw_into(check: _Checker, inner: Generator[Any, Any, Any], exc: Exception,
                call: Mapping[str, Any]) -> tuple[bool, Any]:
    """Throw ``exc`` into a plugin's wrapper: ``(True, value)`` when it turned the
    exception into a valid result, ``(False, None)`` when ``exc`` must go on."""
    hook = check.hook
    try:
        inner.throw(exc)
    except StopIteration as stop:
        return (True, stop.value) if check.accepts(stop.value, call) else (False, None)
    except hookspecs.Refusal as refusal:
        if refusal is exc:
            return False, None
        raise  # the wrapper's own refusal replaces the one it was given
    except BaseException as raised:
        if isinstance(raised, KeyboardInterrupt):
            raise
        if raised is not exc:
            check.report(hook, f"wrapper {hook} raised {raised!r} after yield; skipped", raised)
        return False, None
    _close(inner)
    check.report(hook, f"wrapper {hook} yielded twice; skipped")
    return False, None


def _guard_old_wrapper(check: _Checker, function: Callable[..., Any]) -> Callable[..., Any]:
    """An old-style ``hookwrapper``: it gets pluggy's ``Result``; faults are undone."""
    hook = check.hook

    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Generator[None, Any, None]:
        inner = _enter(check, function, "hookwrapper", args, kwargs)
        if inner is None:
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
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            check.report(hook, f"hookwrapper {hook} raised {exc!r} after yield; skipped", exc)
            _restore(outcome, before, before_exc)
            return
        else:
            _close(inner)
            check.report(hook, f"hookwrapper {hook} yielded twice; skipped")
            _restore(outcome, before, before_exc)
            return
        if outcome.exception is None and not check.accepts(
            outcome.get_result(), check.call(args, kwargs)
        ):
            _restore(outcome, before, before_exc)

    return guarded


def _restore(outcome: Any, value: object, exc: BaseException | None) -> None:
    if exc is not None:
        outcome.force_exception(exc)
    else:
        outcome.force_result(value)
