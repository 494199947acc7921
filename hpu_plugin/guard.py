"""The one guard around every hook implementation: exceptions, answers, time, re-entry.

A hook runs inside the user's ``import torch``, ``torch.compile`` or ``init_process_group``,
so whatever it does is contained here, for every hook and every form alike:

- anything an implementation or a wrapper (before or after its ``yield``) raises, short of
  the user's :class:`KeyboardInterrupt` and a plugin's deliberate :class:`Refusal`, is
  reported once and undone: the decision falls to the next implementation;
- an answer must pass its hook's check (:data:`hookspecs.CHECKS`), or it is a fault too
  (a ``{"x": object()}`` from ``hpu_job_facts`` would end every rank in JSON);
- a call slower than :data:`SLOW_HOOK` is reported, not interrupted: cutting a hook off
  mid-way could leave what it was doing half done;
- an implementation that reaches its own hook again (a compile hook calling
  ``torch.compile``) is skipped in the inner call, rather than recursing until a
  ``RecursionError`` strikes wherever the stack is deepest.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Callable, Generator, Mapping
from typing import Any, Protocol

from hpu_plugin import hookspecs

#: Seconds a hook call may take before it is reported as slow.
SLOW_HOOK = 1.0
#: Characters of a value or exception shown in a report.
SHOWN = 300
#: Every hook a plugin may implement.
HOOK_NAMES: frozenset[str] = frozenset(
    name for name, spec in inspect.getmembers(hookspecs, inspect.isfunction)
    if getattr(spec, hookspecs.PROJECT + "_spec", None) is not None)


class Reporter(Protocol):
    def __call__(self, kind: str, message: str, exc: BaseException | None = None) -> None: ...


def passes(exc: BaseException) -> bool:
    """Must ``exc`` cross the guard? Only the user's interrupt and a plugin's refusal do."""
    return isinstance(exc, (KeyboardInterrupt, hookspecs.Refusal))


def describe(value: object, limit: int = SHOWN) -> str:
    """``repr(value)`` cut to ``limit`` characters; never raises (a hostile ``__repr__`` is
    described by its type)."""
    try:
        text = repr(value)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        text = f"<{type(value).__name__} whose repr() raised {type(exc).__name__}>"
    return f"{text[:limit]}... ({len(text)} characters)" if len(text) > limit else text


class _Unfinished(Exception):
    """A wrapper that yielded again, or raised back what was thrown into it."""


class _Call:
    """One plugin's implementation of one hook: its check, its clock and its re-entry."""

    def __init__(self, hook: str, function: Callable[..., Any], report: Reporter) -> None:
        self.hook, self.function, self.report = hook, function, report
        self.check = hookspecs.CHECKS.get(hook)
        self.active = threading.local()
        try:  # pluggy passes the arguments by position, in the implementation's order
            self.names = tuple(inspect.signature(function).parameters)
        except (TypeError, ValueError):
            self.names = ()

    def reentered(self) -> bool:
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
        """Does the answer pass its hook's check? A failure is reported naming the value."""
        if value is None or self.check is None:
            return True
        problem = self.check(value, {**dict(zip(self.names, args, strict=False)), **kwargs})
        if problem:
            self.report(self.hook + ":answer", f"returned {describe(value)} "
                        f"({type(value).__name__}) from {self.hook}: {problem}; refused")
        return not problem


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
    """A wrapper: a fault makes it a pass-through; what it returns is checked. An exception
    from the implementations inside (a :class:`Refusal`) is thrown into the plugin's wrapper,
    so it can see and handle it as pluggy promises."""

    def enter(args: tuple[Any, ...], kwargs: Mapping[str, Any]
              ) -> Generator[Any, Any, Any] | None:
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

    def resume(inner: Generator[Any, Any, Any], step: Callable[[], Any],
               thrown: BaseException | None = None) -> tuple[bool, Any]:
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

    @functools.wraps(call.function)
    def guarded(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
        inner = None if call.reentered() else enter(args, kwargs)
        if inner is None:
            return (yield)
        try:
            result = yield
        except Exception as exc:  # the implementations inside raised: let it see that
            ok, value = resume(inner, functools.partial(inner.throw, exc), exc)
            if ok and call.accepts(value, args, kwargs):
                return value
            raise
        ok, value = resume(inner, functools.partial(inner.send, result))
        return value if ok and call.accepts(value, args, kwargs) else result

    return guarded
