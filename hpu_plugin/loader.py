"""Finding plugin entry points and importing them within a time budget.

A plugin's import runs inside ``import torch``. The budget (``HPU_PLUGIN_IMPORT_BUDGET``)
bounds how long that import may run: when it is spent, the import is *interrupted*, not
waited for, and the plugin is reported and skipped.

How it is cut off. The import runs on the thread that imports torch, and is interrupted by
raising :class:`ImportBudgetExceeded` in it: from a ``SIGALRM`` timer when that thread is
the main thread and no one else uses the timer (it also ends a ``time.sleep`` or a blocking
read), otherwise from a watchdog thread through ``PyThreadState_SetAsyncExc`` (it ends
Python code; a C call that never returns to Python is not interruptible this way). The
import is not moved to a thread of its own, because ``import torch`` holds torch's module
lock while entry points load: a plugin importing torch from another thread would wait on
that lock until its budget ran out, and a thread left stuck would keep holding the locks of
the modules it was importing. Interrupting the import in place unwinds it instead:
importlib removes the half-imported module and releases its locks, and nothing is left
running.
"""

from __future__ import annotations

import ctypes
import inspect
import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, TypeVar

from hpu_plugin import hookspecs

T = TypeVar("T")

DIST_NAME = "hpu-plugin"
ENTRY_POINT_GROUP = hookspecs.PROJECT
#: How often an interrupted import is interrupted again when it swallowed the first one.
_REPEAT = 0.05


class ImportBudgetExceeded(BaseException):
    """Raised into a plugin's import when its budget is spent. A ``BaseException`` so that
    a plugin's ``except Exception`` does not swallow it."""


@dataclass
class PluginRecord:
    """One entry point as ``hpu-plugin plugins`` shows it.

    ``status`` is ``enabled`` (registered), ``faulted`` (registered, but a hook of it
    faulted: it keeps being asked, since a fault may depend on the input; each fault is in
    ``faults``, the first is its ``reason``), ``disabled`` (a switch kept it out) or
    ``failed`` (it could not be used; ``reason`` says why).
    """

    name: str
    value: str
    distribution: str
    version: str
    first_party: bool
    status: str = "enabled"  # enabled | faulted | disabled | failed
    reason: str = ""
    hooks: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    import_seconds: float | None = None


def normalise(dist_name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", dist_name).lower()


def discover(path: list[str] | None = None, warn: Callable[..., None] | None = None
             ) -> list[metadata.EntryPoint]:
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
            name = normalise(getattr(dist, "_normalized_name", None) or dist.metadata["Name"] or "")
            if name in seen:
                continue
            seen.add(name)
            found.extend(ep for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP)
        except Exception as exc:  # one broken installation must not hide every plugin
            if warn is not None:
                where = getattr(dist, "_path", None) or "an installed distribution"
                warn(
                    "hpu_plugin: cannot read the entry points of %s (%r); its plugins, if any, "
                    "are skipped. Reinstall or remove that distribution.", where, exc,
                )
    return found


def record_for(ep: metadata.EntryPoint) -> PluginRecord:
    dist = getattr(ep, "dist", None)
    dist_name = dist.name if dist is not None else "?"
    if dist is not None:
        first_party = normalise(dist_name) == DIST_NAME
    else:  # an entry point handed in without its distribution (tests, embedders)
        first_party = ep.value.startswith("hpu_plugin.")
    return PluginRecord(
        name=ep.name,
        value=ep.value,
        distribution=dist_name,
        version=dist.version if dist is not None else "?",
        first_party=first_party,
    )


def load_plugin(ep: metadata.EntryPoint, budget: float) -> tuple[object, float]:
    """Import ``ep`` (a class is instantiated with no arguments) within ``budget`` seconds.

    Returns the plugin and the seconds its import took; raises what the import raised, or
    :class:`ImportBudgetExceeded` when it was cut off.
    """
    start = time.perf_counter()

    def load() -> object:
        plugin = ep.load()
        return plugin() if inspect.isclass(plugin) else plugin

    plugin = within(load, budget)
    return plugin, time.perf_counter() - start


def within(call: Callable[[], T], budget: float) -> T:
    """``call()``, interrupted with :class:`ImportBudgetExceeded` after ``budget`` s."""
    if threading.current_thread() is threading.main_thread() and _alarm_free():
        return _with_alarm(call, budget)
    return _with_watchdog(call, budget)


def _alarm_free() -> bool:
    """May the ``SIGALRM`` timer be borrowed? Not when the program (or a test runner's
    timeout) has a handler or a timer of its own."""
    if not hasattr(signal, "setitimer"):
        return False
    try:
        handler = signal.getsignal(signal.SIGALRM)
        return handler in (signal.SIG_DFL, None) and signal.getitimer(signal.ITIMER_REAL) == (
            0.0, 0.0)
    except (ValueError, OSError):
        return False


def _with_alarm(call: Callable[[], T], budget: float) -> T:
    armed = [True]

    def over_budget(signum: int, frame: Any) -> None:
        if armed[0]:
            raise ImportBudgetExceeded

    previous = signal.signal(signal.SIGALRM, over_budget)
    try:
        signal.setitimer(signal.ITIMER_REAL, budget, _REPEAT)
        return call()
    finally:
        # Disarm first: the timer repeats, and an alarm delivered while this block runs
        # used to raise out of it before the previous handler was restored. The next
        # plugin then found SIGALRM taken, fell back to the watchdog thread (which cannot
        # end a sleep) and hung. A store is no point where Python runs signal handlers,
        # so from here on a late alarm is a no-op and the restore below always runs.
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _with_watchdog(call: Callable[[], T], budget: float) -> T:
    target = threading.get_ident()
    done = threading.Event()
    lock = threading.Lock()
    set_async = ctypes.pythonapi.PyThreadState_SetAsyncExc  # no argtypes: NULL clears

    def watch() -> None:
        if done.wait(budget):
            return
        while True:
            with lock:
                if done.is_set():
                    return
                set_async(ctypes.c_ulong(target), ctypes.py_object(ImportBudgetExceeded))
            if done.wait(_REPEAT):
                return

    watchdog = threading.Thread(target=watch, name="hpu_plugin import budget", daemon=True)
    watchdog.start()
    try:
        return call()
    finally:
        with lock:
            done.set()
            set_async(ctypes.c_ulong(target), ctypes.c_void_p(None))
