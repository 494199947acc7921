"""The emulator's own counters: device launches, host synchronisations and eager recipes,
per process.

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

- ``launches`` in eager mode: ``eager_ops + copies_d2d + graph_replays + compiled_graphs +
  fused_kernels``;
- ``launches`` in lazy mode (``PT_HPU_LAZY_MODE=1``): ``lazy_graphs + graph_replays``. There
  a Gaudi runs the ops queued since the last ``mark_step`` (or the last host read, where the
  bridge runs the queue too) as one graph: ``lazy_graphs`` counts those runs (``lazy.py``),
  and the ops, kernels and copies inside them stay counted under their own keys but are
  not launches;
- ``syncs``: the points where the host waits for the device: copies to the host, scalar
  reads and ``torch.hpu.synchronize()``;
- ``eager_recipes`` (eager mode): the recipes the bridge compiles for eager ops, one the
  first time an op runs with a new signature (name, dtypes, sizes, strides, scalar
  arguments; a fused kernel's by its tensors' shapes), counted per process. The bridge
  publishes no metric for them (``synapse_helpers/graph.cpp`` emits ``GRAPH_COMPILE`` only
  for non-eager graphs), so ``metric_global("graph_compilation")`` leaves them out on Gaudi
  and here alike; they are this counter's alone. The bridge's shape-agnostic eager compiler
  reuses one recipe across shapes for many ops, and its recipe cache on disk may hold them
  from an earlier run: so this is the most a process compiles, not what it must.
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
#: A run of the graph lazy mode accumulated (at ``mark_step`` or a host read).
LAZY_GRAPH = "lazy_graphs"
#: An eager recipe compiled for a fused kernel (the runtime counts the other ops').
EAGER_RECIPE = "fused_eager_recipes"

_lock = threading.Lock()
_depth = threading.local()
_python: dict[str, int] = {GRAPH_REPLAY: 0, FUSED_KERNEL: 0, COMPILED_GRAPH: 0,
                           LAZY_GRAPH: 0, EAGER_RECIPE: 0, "synchronize_calls": 0}
#: Launch kinds counted in Python (the others are syncs and recipes).
_LAUNCHES = (GRAPH_REPLAY, FUSED_KERNEL, COMPILED_GRAPH, LAZY_GRAPH)
_base: dict[str, int] = {}
#: The signatures of the fused kernels run eagerly so far (their eager recipes).
_fused_signatures: set[tuple[Any, ...]] = set()


def _raw() -> dict[str, int]:
    native = {k: int(v) for k, v in runtime.extension().launch_counters().items()}
    with _lock:
        native.update(_python)
    return native


def _lazy() -> bool:
    from hpu_emulator import lazy

    if not lazy.is_lazy():
        return False
    lazy.take_closed()  # the graphs host reads ran since the last mark_step
    return True


def snapshot() -> dict[str, int]:
    """The counters since the process started (or since :func:`reset`)."""
    lazy = _lazy()
    raw = _raw()
    now = {k: v - _base.get(k, 0) for k, v in raw.items()}
    eager = now["eager_ops"]
    if lazy:  # the ops, kernels and copies are parts of the graphs a Gaudi runs
        launches = now[LAZY_GRAPH] + now[GRAPH_REPLAY]
    else:
        launches = eager + now["copies_d2d"] + sum(now[k] for k in _LAUNCHES)
    return {
        "launches": launches,
        "eager_ops": eager,
        "copies_d2d": now["copies_d2d"],
        **{k: now[k] for k in _LAUNCHES},
        "syncs": now["copies_d2h"] + now["scalar_reads"] + now["synchronize_calls"],
        "copies_h2d": now["copies_h2d"],
        "copies_d2h": now["copies_d2h"],
        "scalar_reads": now["scalar_reads"],
        "synchronize_calls": now["synchronize_calls"],
        "inner_ops": now["inner_ops"],
        "eager_recipes": now.get("eager_recipes", 0) + now[EAGER_RECIPE],
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
    """Decorate a function whose call is one device launch of ``kind`` (a fused kernel's
    first eager run with new tensor shapes also an eager recipe). A fused kernel's
    intermediate tensors are its workspace: on a Gaudi they stay in the chip's local memory,
    so only its outputs count towards the device's peak memory and its limit."""

    def decorate(function: F) -> F:
        @wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            if kind != FUSED_KERNEL:
                with launch(kind):
                    return function(*args, **kwargs)
            if getattr(_depth, "value", 0) == 0:
                _eager_recipe(function, args, kwargs)
            ext = runtime.extension()
            with launch(kind):
                ext.enter_workspace()
                try:
                    result = function(*args, **kwargs)
                except BaseException:
                    ext.leave_workspace(False)
                    raise
                ext.leave_workspace(True)
                return result

        return run  # type: ignore[return-value]

    return decorate


def _eager_recipe(function: Callable[..., Any], args: Any, kwargs: Any) -> None:
    """Count a fused kernel's eager recipe the first time it runs with these tensors'
    shapes, dtypes and strides (not in lazy mode, nor inside a graph being traced)."""
    import torch

    from hpu_emulator import lazy, recipes

    if lazy.is_lazy() or torch.compiler.is_compiling():
        return
    tensors = [v for v in torch.utils._pytree.tree_leaves((args, kwargs))
               if isinstance(v, torch.Tensor)]
    key = (function.__module__, function.__qualname__, recipes.signature(tensors))
    with _lock:
        if key not in _fused_signatures:
            _fused_signatures.add(key)
            _python[EAGER_RECIPE] += 1


def forget_recipes() -> None:
    """Forget the eager recipes seen (as a new process would; ``recipes.clear``)."""
    with _lock:
        _fused_signatures.clear()
    runtime.extension().eager_recipes_forget()


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
