"""The one guard around every hook implementation: exceptions, answers, time, re-entry.

A plugin's hook runs inside the user's ``import torch``, ``torch.compile`` or
``init_process_group``, so whatever it does is contained here, for every hook alike:

- *exceptions*: anything a plain, ``tryfirst`` or ``trylast`` implementation or a
  ``wrapper`` (before or after its ``yield``) raises, short of :class:`KeyboardInterrupt`
  (the user's Ctrl-C) and :class:`hookspecs.Refusal` (a plugin's deliberate answer), is
  reported once and undone: the decision falls to the next implementation;
- *answers*: checked against the spec's return annotation, items and dataclass fields
  included (a ``{"x": object()}`` from ``hpu_job_facts`` would end every rank in JSON),
  then against the spec's meaning check (:data:`hookspecs.MEANING`); a failure is a fault;
- *time*: a call slower than :data:`SLOW_HOOK` is reported naming the plugin. It is not
  interrupted: a hook runs inside the user's call, and cutting it off mid-way could leave
  what it was doing half done;
- *re-entry*: an implementation that reaches its own hook again (a compile hook calling
  ``torch.compile``) is skipped in the inner call and reported. Left alone it recursed until
  ``RecursionError``, which struck wherever the stack was deepest, often inside a lazy import
  of the host (sympy), leaving that module half imported for the rest of the program.

Everything reported is formatted by :func:`describe`, which never raises and cuts long text:
an exception whose ``repr`` raises is described by its type.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import threading
import time
import types
import typing
from collections.abc import Callable, Generator, Mapping
from typing import Any, Protocol

from hpu_plugin import hookspecs

#: Seconds a hook call may take before it is reported as slow.
SLOW_HOOK = 1.0
#: Characters of a value or exception shown in a report.
SHOWN = 300


class Reporter(Protocol):
    def __call__(self, kind: str, message: str, exc: BaseException | None = None) -> None: ...


def passes(exc: BaseException) -> bool:
    """Must ``exc`` cross the guard? Only the user's interrupt and a plugin's refusal do."""
    return isinstance(exc, (KeyboardInterrupt, hookspecs.Refusal))


def describe(value: object, limit: int = SHOWN) -> str:
    """``repr(value)`` cut to ``limit`` characters; never raises, whatever ``value`` is."""
    try:
        text = repr(value)
    except BaseException as exc:  # a hostile __repr__ must not escape the guard
        if isinstance(exc, KeyboardInterrupt):
            raise
        text = f"<{type(value).__name__} whose repr() raised {type(exc).__name__}>"
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text)} characters)"
    return text


def _spec_types() -> dict[str, Any]:
    """Each deciding spec's return annotation, ``None`` taken out (read from the specs, so a
    spec that changes its return type changes what the guard accepts)."""
    declared: dict[str, Any] = {}
    for name in HOOK_NAMES:
        returned = typing.get_type_hints(getattr(hookspecs, name)).get("return", type(None))
        options = [a for a in _union_args(returned) if a is not type(None)]
        if options:
            declared[name] = options[0] if len(options) == 1 else typing.Union[tuple(options)]  # noqa: UP007
    return declared


def _union_args(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return tuple(a for arg in typing.get_args(annotation) for a in _union_args(arg))
    return (annotation,)


def conforms(value: object, annotation: Any) -> bool:
    """Does ``value`` have the type ``annotation`` declares, items of containers and fields
    of dataclasses included?"""
    if annotation is Any or annotation is object:
        return True
    if annotation is None or annotation is type(None):
        return value is None
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(conforms(value, arg) for arg in args)
    if origin is typing.Literal:
        return value in args
    if annotation is Callable or origin is Callable or origin is typing.Callable:  # type: ignore[comparison-overlap]
        return callable(value)
    if origin is not None:
        return isinstance(value, origin) and _items_conform(value, origin, args)
    if not isinstance(annotation, type) or not isinstance(value, annotation):
        return False
    if dataclasses.is_dataclass(annotation):
        hints = typing.get_type_hints(annotation)
        return all(conforms(getattr(value, f.name, None), hints.get(f.name, Any))
                   for f in dataclasses.fields(annotation))
    return True


def _items_conform(value: Any, origin: Any, args: tuple[Any, ...]) -> bool:
    if not args:
        return True
    if issubclass(origin, Mapping):
        return all(conforms(k, args[0]) and conforms(v, args[-1]) for k, v in value.items())
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        return len(value) == len(args) and all(map(conforms, value, args))
    return all(conforms(item, args[0]) for item in value)


#: Every hook a plugin may implement.
HOOK_NAMES: frozenset[str] = frozenset(
    name for name, spec in inspect.getmembers(hookspecs, inspect.isfunction)
    if getattr(spec, hookspecs.PROJECT + "_spec", None) is not None
)
#: What a deciding hook may return besides ``None``; hooks whose result is ignored are not
#: listed.
RESULT_TYPES: Mapping[str, Any] = types.MappingProxyType(_spec_types())


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "").replace("collections.abc.", "")


class _Call:
    """One plugin's implementation of one hook: its checks, its clock and its re-entry."""

    def __init__(self, hook: str, function: Callable[..., Any], report: Reporter) -> None:
        self.hook, self.function, self.report = hook, function, report
        self.expected = RESULT_TYPES.get(hook)
        self.meaning = hookspecs.MEANING.get(hook)
        self.active = threading.local()
        try:  # pluggy passes the arguments by position, in the implementation's order
            self.names = tuple(inspect.signature(function).parameters)
        except (TypeError, ValueError):
            self.names = ()

    def reentered(self) -> bool:
        """Is this implementation already running on this thread? Reported when it is."""
        if not getattr(self.active, "on", False):
            return False
        self.report(self.hook + ":reentry", f"reached {self.hook} again from inside its own "
                    f"{self.hook} (through the host); the inner call skips it")
        return True

    def run(self, step: Callable[[], Any], what: str) -> tuple[bool, Any]:
        """``(True, result)`` of the plugin's ``step``, or ``(False, None)`` when it faulted
        (reported); a slow step is reported too."""
        self.active.on, start = True, time.perf_counter()
        try:
            return True, step()
        except BaseException as exc:  # sys.exit() in a hook ends no program
            if passes(exc) or isinstance(exc, (StopIteration, _Unfinished)):
                raise
            self.report(self.hook, f"{what} raised {describe(exc)} in {self.hook}; skipped", exc)
            return False, None
        finally:
            self.active.on = False
            spent = time.perf_counter() - start
            if spent > SLOW_HOOK:
                self.report(self.hook + ":slow", f"took {spent:.1f} s in {self.hook}, inside "
                            "the user's call; hooks must answer at once")

    def accepts(self, value: object, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
        if value is None or self.expected is None:
            return True
        if not conforms(value, self.expected):
            self.report(self.hook + ":type", f"returned {describe(value)} "
                        f"({type(value).__name__}) from {self.hook}, "
                        f"which the hook spec does not allow (expected "
                        f"{_type_name(self.expected)} or None); skipped")
            return False
        call = {**dict(zip(self.names, args, strict=False)), **kwargs}
        problem = self.meaning(value, call) if self.meaning is not None else None
        if problem:
            self.report(self.hook + ":value",
                        f"returned {describe(value)} from {self.hook}: {problem}; refused")
            return False
        return True


def guard(hook: str, function: Callable[..., Any], opts: Mapping[str, Any],
          report: Reporter) -> Callable[..., Any]:
    """``function`` (a plugin's hook implementation) behind the guard for its form."""
    call = _Call(hook, function, report)
    if opts.get("wrapper"):
        return _guard_wrapper(call)

    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if call.reentered():
            return None
        try:
            ok, result = call.run(lambda: function(*args, **kwargs), "it")
        except StopIteration as exc:  # would end pluggy's own loop: a fault like any other
            call.report(hook, f"raised {describe(exc)} in {hook}; skipped", exc)
            return None
        return result if ok and call.accepts(result, args, kwargs) else None

    return guarded


def _guard_wrapper(call: _Call) -> Callable[..., Any]:
    """A wrapper: faults make it a pass-through; what it returns is checked. An exception
    from the implementations inside (a :class:`Refusal`) is thrown into the plugin's
    wrapper, so it can see and handle it as pluggy promises."""

    @functools.wraps(call.function)
    def guarded(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
        inner = None if call.reentered() else _enter(call, args, kwargs)
        if inner is None:
            return (yield)
        try:
            result = yield
        except Exception as exc:  # the implementations inside raised: let it see that
            ok, value = _resume(call, inner, functools.partial(inner.throw, exc), exc)
            if ok and call.accepts(value, args, kwargs):
                return value
            raise
        ok, value = _resume(call, inner, functools.partial(inner.send, result))
        return value if ok and call.accepts(value, args, kwargs) else result

    return guarded


def _enter(call: _Call, args: tuple[Any, ...], kwargs: Mapping[str, Any]
           ) -> Generator[Any, Any, Any] | None:
    """Run a wrapper up to its ``yield``; ``None`` (reported) when it faulted before."""
    def first() -> Generator[Any, Any, Any]:
        inner = call.function(*args, **kwargs)
        next(inner)
        return inner

    try:
        ok, inner = call.run(first, "the wrapper before its yield")
    except StopIteration:
        call.report(call.hook, f"wrapper {call.hook} did not yield; skipped")
        return None
    return inner if ok else None


class _Unfinished(Exception):
    """A wrapper that yielded again, or raised back what was thrown into it."""


def _resume(call: _Call, inner: Generator[Any, Any, Any], step: Callable[[], Any],
            thrown: BaseException | None = None) -> tuple[bool, Any]:
    """Resume a wrapper after its ``yield``: ``(True, its return value)``, or ``(False,
    None)`` when it raised (a fault, reported; a refusal of its own goes on), gave back the
    exception thrown into it, or yielded twice (reported)."""
    def finish() -> Any:
        try:
            step()
        except StopIteration as stop:
            return stop.value
        except BaseException as raised:
            if raised is thrown:
                raise _Unfinished from None
            raise
        try:
            inner.close()
        finally:
            call.report(call.hook, f"wrapper {call.hook} yielded twice; skipped")
        raise _Unfinished

    try:
        return call.run(finish, "the wrapper after its yield")
    except _Unfinished:
        return False, None
