"""The emulator's own counters: device launches and host synchronisations, per process.

On Gaudi in eager mode every op is a launch of its own, and the speed of the fast paths
(HPU graphs, fused kernels) is that they make one launch of many ops. Times measured on a
CPU say nothing about that; counted launches do. The bridge has no such counter (its metrics,
``metrics.py``, count graph compilations, CPU fallbacks, the recipe cache and
defragmentations): these are the emulator's, read with :func:`snapshot` and nothing else.

Counted where it costs one relaxed atomic add (the C++ runtime): every op the zero-copy
fallback runs (an eager op), device-to-device copies, host-to-device and device-to-host
copies, and scalar reads (``.item()``, ``bool(t)``). A graph replay, a run of a graph that
``hpu_backend`` compiled (one recipe: eager mode's graphs) or a fused kernel is one launch:
Python wraps it in :func:`launch`, which counts it by kind and marks the ops it runs as its
inner work, so they are not counted as launches again. Ops outside a compiled graph (at a
graph break, or a part dynamo does not trace) stay eager ops, one launch each. The emulator
has no list of the ops Gaudi runs on its CPU fallback, so none inside a graph is split off
as Gaudi's partitioner would (each such op would be a launch of its own there).

- ``launches``: ``eager_ops + copies_d2d + graph_replays + compiled_graphs + fused_kernels``;
- ``syncs``: the points where the host waits for the device: copies to the host, scalar
  reads and ``torch.hpu.synchronize()``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from types import ModuleType
from typing import Any, TypeVar

from hpu_emulator import runtime

F = TypeVar("F", bound=Callable[..., Any])

#: Launch kinds counted in Python (the C++ runtime counts eager ops and copies).
GRAPH_REPLAY = "graph_replays"
FUSED_KERNEL = "fused_kernels"
#: A run of a graph ``hpu_backend`` compiled (one recipe launch; eager mode's graphs).
COMPILED_GRAPH = "compiled_graphs"

_lock = threading.Lock()
_depth = threading.local()
_python: dict[str, int] = {GRAPH_REPLAY: 0, FUSED_KERNEL: 0, COMPILED_GRAPH: 0,
                           "synchronize_calls": 0}
_base: dict[str, int] = {}


def _raw() -> dict[str, int]:
    native = {k: int(v) for k, v in runtime.extension().launch_counters().items()}
    with _lock:
        native.update(_python)
    return native


def snapshot() -> dict[str, int]:
    """The counters since the process started (or since :func:`reset`)."""
    raw = _raw()
    now = {k: v - _base.get(k, 0) for k, v in raw.items()}
    eager = now["eager_ops"]
    python_launches = sum(v for k, v in now.items() if k in _python and k != "synchronize_calls")
    return {
        "launches": eager + now["copies_d2d"] + python_launches,
        "eager_ops": eager,
        "copies_d2d": now["copies_d2d"],
        **{k: v for k, v in now.items() if k in _python and k != "synchronize_calls"},
        "syncs": now["copies_d2h"] + now["scalar_reads"] + now["synchronize_calls"],
        "copies_h2d": now["copies_h2d"],
        "copies_d2h": now["copies_d2h"],
        "scalar_reads": now["scalar_reads"],
        "synchronize_calls": now["synchronize_calls"],
        "inner_ops": now["inner_ops"],
    }


def reset() -> None:
    """Count from now on (the raw counters keep running; other readers are not disturbed)."""
    global _base
    _base = _raw()


def count(kind: str, n: int = 1) -> None:
    """Count ``n`` events of a Python-side ``kind`` (a launch kind, or ``synchronize_calls``)."""
    with _lock:
        _python[kind] = _python.get(kind, 0) + n


@contextmanager
def launch(kind: str) -> Iterator[None]:
    """One device launch of ``kind``; the ops run inside are its inner work (a launch inside
    another, a kernel that calls another, is part of the outer one)."""
    ext = runtime.extension()
    depth = getattr(_depth, "value", 0)
    if depth == 0:
        count(kind)
    _depth.value = depth + 1
    ext.enter_launch()
    try:
        yield
    finally:
        ext.leave_launch()
        _depth.value = depth


def counted(kind: str) -> Callable[[F], F]:
    """Decorate a function whose call is one device launch of ``kind``."""

    def decorate(function: F) -> F:
        @wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            with launch(kind):
                return function(*args, **kwargs)

        return run  # type: ignore[return-value]

    return decorate


def count_kernels() -> None:
    """Make each of the emulator's Gaudi kernels (``kernels/``: what ``torch.ops.hpu.*`` and
    the hpex classes run) one fused-kernel launch, each HPU graph replay one graph launch,
    and each run of a graph ``hpu_backend`` compiled one compiled-graph launch. Called
    before the kernels are registered, so the registration takes the counted functions;
    their modules are left as written."""
    from hpu_emulator import graphs, kernels, recipes

    replay = vars(graphs.HPUGraph).get("_replay")
    if replay is not None and not getattr(replay, "_counted", False):
        counted_replay = counted(GRAPH_REPLAY)(replay)
        counted_replay._counted = True  # type: ignore[attr-defined]
        graphs.HPUGraph._replay = counted_replay  # type: ignore[method-assign]
    if not getattr(recipes.run_compiled, "_counted", False):
        counted_run = counted(COMPILED_GRAPH)(recipes.run_compiled)
        counted_run._counted = True  # type: ignore[attr-defined]
        recipes.run_compiled = counted_run

    functions = {id(kernel) for _, kernel, _ in kernels._ops()}
    families = [module for module in vars(kernels).values() if isinstance(module, ModuleType)
                and module.__name__.startswith(kernels.__name__ + ".")]
    for family in families:
        for name, value in list(vars(family).items()):
            if id(value) in functions and not getattr(value, "_counted", False):
                wrapped = counted(FUSED_KERNEL)(value)
                wrapped._counted = True  # type: ignore[attr-defined]
                setattr(family, name, wrapped)
