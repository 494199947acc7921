"""Lazy mode of the emulated Gaudi (``PT_HPU_LAZY_MODE=1``): where the accumulated graph runs.

On Gaudi, lazy mode queues the ops and runs them as one graph at ``mark_step()`` and where
a value must reach the host (the bridge's ``.item()`` and copies to the host call its step
marker); each distinct graph is compiled once and then found in the recipe cache. The
emulator runs every op at once, as in eager mode, so results are the same; what it models is
the accounting: its C++ runtime keeps a running hash of the ops since the last step (their
names, tensor sizes, strides and dtypes, scalar arguments), closes that graph at a host read,
and ``mark_step`` hands the graphs to the recipe cache, so ``graph_compilation`` and
``recipe_cache`` count a compilation for each new graph and a hit for a repeated one, and
the emulator's own counters (``counters.py``) count each graph run as one launch
(``lazy_graphs``). Step closures (``add_step_closure``) run at the mark, as on the bridge.

In eager mode the runtime instead notes each op's signature, so that the counters can say
how many eager recipes the bridge would compile (:func:`start`).

``torch.compile`` stays refused in lazy mode (``hpu_plugin.gaudi.modes``), and int64 stays
int64 on the device only with ``PT_ENABLE_INT64_SUPPORT=1`` (``generations.int64_on_device``,
the bridge's lazy ``IsInt64Supported``), as on hardware.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from hpu_emulator import recipes, runtime

_lock = threading.Lock()
_closures: list[Callable[[], Any]] = []
_state = {"since": time.perf_counter_ns()}
#: Set by ``graphs`` when it loads: takes a step mark while an HPU graph is being captured
#: (the ops are the captured graph's) and answers whether it did. A callback, not an import,
#: so that ``graphs`` (which marks steps here) and this module do not import each other.
_capture_step: list[Callable[[], bool]] = []


def is_lazy() -> bool:
    """The emulator's mode, read once at start (as the bridge reads ``PT_HPU_LAZY_MODE``)."""
    return runtime.started() and runtime.current_config().lazy


def start() -> None:
    """Turn the runtime's graph trace on in lazy mode, and its lazy-mode acceptance of CPU
    inputs; in eager mode its note of each op's recipe signature (called once at emulator
    start)."""
    if is_lazy():
        runtime.extension().lazy_trace(True)
        runtime.extension().lazy_mode(True)
        _wrap_save_and_load()
    else:
        runtime.extension().eager_recipes(True)


def _on_cpu(obj: Any) -> Any:
    """What the bridge's lazy ``torch.save`` writes: every tensor in nested dicts, lists and
    tuples as a CPU copy (dict subclasses become dicts, as there); anything else as it is."""
    import torch

    if isinstance(obj, torch.Size):
        return obj
    if isinstance(obj, dict):
        return {key: _on_cpu(value) for key, value in obj.items()}
    if isinstance(obj, list):
        return [_on_cpu(item) for item in obj]
    if isinstance(obj, tuple):
        return tuple(_on_cpu(item) for item in obj)
    return obj.data.detach().clone().cpu() if isinstance(obj, torch.Tensor) else obj


def _to(obj: Any, where: Any) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return where(obj, obj.device) if callable(where) else obj.to(where)
    if isinstance(obj, dict):
        return {key: _to(value, where) for key, value in obj.items()}
    if isinstance(obj, list):
        return [_to(item, where) for item in obj]
    if isinstance(obj, tuple):
        return tuple(_to(item, where) for item in obj)
    return obj


def _wrap_save_and_load() -> None:
    """As the bridge in lazy mode (``core/torch_overwrites.py``): ``torch.save`` writes HPU
    tensors as CPU tensors; ``torch.load`` reads onto the CPU, then moves what it read to
    ``map_location`` (left on the CPU when none is given). The bridge also makes pickle
    protocol 4 the default, which torch's ``weights_only`` loader cannot read outside a Gaudi
    process (pytorch#118092); the emulator keeps torch's protocol (its README says so)."""
    import functools

    import torch

    from hpu_plugin.patching import ours

    save, load = torch.save, torch.load

    @functools.wraps(save)
    def lazy_save(obj: object, f: Any, *args: Any, **kwargs: Any) -> None:
        save(_on_cpu(obj), f, *args, **kwargs)

    @functools.wraps(load)
    def lazy_load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
        obj = load(f, "cpu", *args, **kwargs)
        where = map_location.get("cpu", "cpu") if isinstance(map_location, dict) else (
            map_location or "cpu")
        return obj if where == "cpu" else _to(obj, where)

    runtime.patches.set(torch, "save", ours(lazy_save))
    runtime.patches.set(torch, "load", ours(lazy_load))


class LazyModeRequired(RuntimeError):
    """An HPU-graph API used in eager mode, where the bridge does not offer it."""


def require_lazy(what: str) -> None:
    if not is_lazy():
        raise LazyModeRequired(
            f"{what}: HPU graphs need lazy mode; the Gaudi software offers them "
            "(torch.hpu.HPUGraph, wrap_in_hpu_graph, ...) only when PT_HPU_LAZY_MODE=1. Fix: "
            "set PT_HPU_LAZY_MODE=1 before starting Python (torch.compile is then "
            "unavailable), or do not use HPU graphs in eager mode"
        )


def mark_step() -> None:
    """``htcore.mark_step()``: run the accumulated graph (:func:`flush`), then the step
    closures."""
    if not is_lazy():
        return
    flush()
    with _lock:
        closures = list(_closures)
        _closures.clear()
    for closure in closures:
        closure()
    from hpu_emulator import metrics

    metrics.dispatcher.publish(metrics.MARK_STEP, {})


def flush() -> None:
    """Run the accumulated graph: one compilation the first time this graph is seen, a
    recipe-cache hit after; nothing accumulated, nothing counted. The bridge's own step
    marks (before an HPU-graph capture or replay) do this without the Python closures.
    The graphs host reads closed since the last mark are accounted first."""
    if not is_lazy():
        return
    closed = runtime.extension().lazy_take_closed()
    graph_hash, ops = runtime.extension().lazy_take()
    now = time.perf_counter_ns()
    with _lock:
        since, _state["since"] = _state["since"], now
    if any(take() for take in _capture_step):
        return  # the ops are the captured graph's
    graphs = [*closed, *([(graph_hash, ops)] if ops else [])]
    _account(graphs, now - since)


def take_closed() -> None:
    """Account the graphs host reads have run since the last mark (the counters call this
    before they are read, so that a program that reads values but never marks a step is
    counted too)."""
    if not is_lazy():
        return
    closed = runtime.extension().lazy_take_closed()
    if not closed:
        return
    now = time.perf_counter_ns()
    with _lock:
        since, _state["since"] = _state["since"], now
    _account(closed, now - since)


def _account(graphs: list[tuple[int, int]], nanoseconds: int) -> None:
    """Each graph run: a recipe compiled or found, and one launch."""
    from hpu_emulator import counters

    for graph_hash, _ in graphs:
        recipes.account(f"lazy{graph_hash:016x}", (), "lazy",
                        nanoseconds // 1000 // max(1, len(graphs)))
    counters.count(counters.LAZY_GRAPH, len(graphs))


def discard_pending() -> None:
    """Forget the ops accumulated so far: they were a captured HPU graph's (counted there)
    or a replay's (which compiles nothing)."""
    if is_lazy():
        runtime.extension().lazy_take_closed()
        runtime.extension().lazy_take()
        _state["since"] = time.perf_counter_ns()


def add_step_closure(closure: Callable[..., Any], args: tuple[Any, ...] = ()) -> None:
    with _lock:
        _closures.append(lambda: closure(*args))
