"""The recipe cache of the emulated Gaudi: what a compiled graph costs in compilations.

On Gaudi, ``hpu_backend`` hands each FX graph (the forward and, when training, the backward
graph that AOT autograd splits off) to the bridge, which compiles a Synapse *recipe* the first
time the graph runs with a given concrete input signature and caches it: a later run with the
same signature is a cache hit, any new shape, dtype or stride is a miss and a compilation
(seconds on hardware). This module models that: the key is the graph's generated code (two
identical graphs share recipes, as the bridge's graph hash does) and, for each input, its
shape, dtype and strides, or the value of a scalar.

A graph that dynamo traced with symbolic sizes (after a recompile, by automatic dynamic
shapes, or ``dynamic=True``) is a *dynamic* graph for the bridge, which compiles ranged
recipes instead (its ``DynamicBucketInfo``): the first run compiles a static recipe for its
exact sizes; a run that no recipe's ranges cover compiles a new one whose range per size is
[the smallest size seen, twice the current size] (the default historic minimum and calculated
maximum policies). Sizes below 2 are kept exact, as there.

Each miss publishes ``GRAPH_COMPILATION`` (the duration of the first run, in microseconds)
and ``CACHE_MISS``; each hit ``CACHE_HIT`` (see ``metrics.py``).

Recipes persist across processes where the bridge keeps them on disk: with
``PT_HPU_RECIPE_CACHE_CONFIG=<path>[,<delete on start>[,<size MB>]]`` (or the older
``PT_RECIPE_CACHE_PATH``) each compiled recipe is a file in ``<path>`` named by its key, and a
recipe found there is read, not compiled (a hit), as the bridge's ``DiskCache`` does. More
than three fields is refused with the bridge's message; ``true`` as the second clears the
directory when the process first uses it. The size bound is not enforced here (an empty file
a recipe), and nothing of the compiled graph is stored: what persists is the accounting.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from hpu_emulator import metrics

Signature = tuple[Any, ...]

_lock = threading.Lock()
_recipes: set[tuple[str, Signature]] = set()
#: Dynamic graphs: per (graph, dtypes and ranks) the ranges of its recipes.
_ranged: dict[tuple[str, Signature], DynamicRecipes] = {}
#: The disk cache's directory, once read from the environment ("" when there is none).
_disk: list[str] = []

CONFIG = "PT_HPU_RECIPE_CACHE_CONFIG"
LEGACY_PATH = "PT_RECIPE_CACHE_PATH"


def disk_directory() -> str:
    """The recipe cache's directory (empty: recipes are not kept on disk), read once as the
    bridge's ``RecipeCacheConfig`` reads it; a ``true`` delete flag clears it then."""
    if _disk:
        return _disk[0]
    raw = os.environ.get(CONFIG)
    delete = False
    if raw is not None:
        fields = raw.split(",")
        if not 1 <= len(fields) <= 3:
            raise RuntimeError(
                f"Expected number of parameters extracted from {CONFIG} should be from range "
                f"<1:3>. (got {raw!r}: give <path>[,<delete on start>[,<size MB>]])")
        path = fields[0].strip()
        delete = len(fields) > 1 and fields[1].strip().lower() in ("true", "1")
    else:
        path = os.environ.get(LEGACY_PATH, "").strip()
    if path:
        if delete:
            shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path, exist_ok=True)
    _disk.append(path)
    return path


def _on_disk(key: str) -> bool:
    """Whether the recipe ``key`` is in the disk cache; if not, it is written there now."""
    directory = disk_directory()
    if not directory:
        return False
    name = os.path.join(directory, hashlib.sha1(key.encode()).hexdigest() + ".recipe")
    if os.path.exists(name):
        return True
    partial = f"{name}.{os.getpid()}.tmp"
    with open(partial, "w"):
        pass
    os.replace(partial, name)  # whole or absent for a process reading it meanwhile
    return False


def signature(inputs: Sequence[Any]) -> Signature:
    """What the bridge keys a recipe on: per input its shape, dtype and strides (tensors),
    its value (integers and floats that reach the graph as scalars), else its type."""
    parts: list[Any] = []
    for value in inputs:
        if isinstance(value, torch.Tensor):
            parts.append((tuple(value.shape), str(value.dtype), tuple(value.stride())))
        elif isinstance(value, (bool, int, float, torch.SymInt, torch.SymFloat)):
            parts.append(("scalar", value if isinstance(value, (bool, int, float)) else str(value)))
        else:
            parts.append(type(value).__name__)
    return tuple(parts)


def _is_symbolic(value: Any) -> bool:
    if isinstance(value, (torch.SymInt, torch.SymFloat)):
        return True
    if isinstance(value, torch.Tensor):
        return any(isinstance(n, torch.SymInt) for n in (*value.shape, *value.stride()))
    return False


def _sizes(inputs: Sequence[Any]) -> tuple[Signature, tuple[int, ...]]:
    """A dynamic graph's inputs as what must match exactly (dtypes, ranks, non-integer
    scalars) and the integers its ranges cover (sizes, strides, integer scalars)."""
    fixed: list[Any] = []
    sizes: list[int] = []
    for value in inputs:
        if isinstance(value, torch.Tensor):
            fixed.append((str(value.dtype), value.ndim))
            sizes.extend(int(n) for n in (*value.shape, *value.stride()))
        elif isinstance(value, int) and not isinstance(value, bool):
            fixed.append("int")
            sizes.append(value)
        else:
            fixed.append(signature([value]))
    return tuple(fixed), tuple(sizes)


class DynamicRecipes:
    """The ranged recipes of one dynamic graph (see the module's docstring)."""

    def __init__(self, sizes: tuple[int, ...]) -> None:
        self.smallest = list(sizes)
        self.ranges: list[tuple[tuple[int, int], ...]] = [tuple((n, n) for n in sizes)]

    def admit(self, sizes: tuple[int, ...]) -> tuple[bool, int]:
        """(compiled a new recipe?, the recipe's index) for a run with these sizes."""
        self.smallest = [min(a, b) for a, b in zip(self.smallest, sizes, strict=True)]
        for index, ranges in enumerate(self.ranges):
            if all(lo <= n <= hi for n, (lo, hi) in zip(sizes, ranges, strict=True)):
                return False, index
        self.ranges.append(tuple(
            (n, n) if n < 2 else (min(low, n), 2 * n)
            for n, low in zip(sizes, self.smallest, strict=True)
        ))
        return True, len(self.ranges) - 1


def _admit(graph_key: str, args: Sequence[Any], dynamic: bool) -> tuple[bool, str]:
    """(a new recipe?, its id) for one run of a graph, under the cache lock."""
    if not dynamic:
        key = (graph_key, signature(args))
        new = key not in _recipes
        if new:
            _recipes.add(key)
            new = not _on_disk(repr(key))
        return new, f"{graph_key}_{abs(hash(key[1])) % 10**8}"
    fixed, sizes = _sizes(args)
    recipes = _ranged.get((graph_key, fixed))
    if recipes is None:
        recipes = _ranged[(graph_key, fixed)] = DynamicRecipes(sizes)
        new, index = True, 0
    else:
        new, index = recipes.admit(sizes)
    if new:
        new = not _on_disk(repr((graph_key, fixed, recipes.ranges[index])))
    return new, f"{graph_key}_{abs(hash(fixed)) % 10**8}_{index}"


def _graph_key(graph: torch.fx.GraphModule) -> str:
    return hashlib.sha1(graph.code.encode()).hexdigest()[:16]


def _makes_new_tensor(target: Any) -> bool:
    """An aten op that returns fresh tensors (no view or in-place alias of an input)."""
    schema = getattr(target, "_schema", None)
    return schema is not None and not schema.is_mutable and all(
        ret.alias_info is None for ret in schema.returns)


def _traced_contiguous(value: Any) -> bool:
    from torch.fx.experimental.symbolic_shapes import guard_or_false

    try:
        return isinstance(value, torch.Tensor) and bool(guard_or_false(value.is_contiguous()))
    except Exception:  # a value the trace cannot answer for: keep the kernel's layout
        return False


def _as_traced(graph: torch.fx.GraphModule) -> None:
    """Give results the contiguous layout the trace gave them.

    PyTorch's fake tensors take many hpu results as dense and contiguous (its fast paths,
    which symbolic sizes use, and ``is_noncontiguous_supported`` in fake_impls.py), where
    the CPU kernels keep an input's transposed layout. The emulator runs a graph op by op
    on CPU kernels, so a later ``view`` in the graph that fits only the traced strides would
    fail; the bridge compiles the whole graph and never shows such a difference. Only where
    the trace said contiguous: a result the trace kept transposed (static traces run the
    meta kernels, which keep layouts) is left as the kernel makes it.
    """
    changed = False
    for node in list(graph.graph.nodes):
        if node.op != "call_function" or not _makes_new_tensor(node.target):
            continue
        if not _traced_contiguous(node.meta.get("val")):
            continue
        with graph.graph.inserting_after(node):
            dense = graph.graph.call_method("contiguous", (node,))
        node.replace_all_uses_with(dense, delete_user_cb=lambda user, d=dense: user is not d)
        dense.meta["val"] = node.meta.get("val")
        changed = True
    if changed:
        graph.recompile()


def run_compiled(compiled: Callable[..., Any], args: list[Any], boxed: bool) -> Any:
    """One run of a compiled graph: one recipe launch on Gaudi (``counters`` counts it so)."""
    return compiled(args) if boxed else compiled(*args)


def counted(compiler: Callable[..., Any], kind: str) -> Callable[..., Any]:
    """Wrap an AOT-autograd compiler (forward or backward) so that every run of what it
    compiled goes through the recipe cache."""

    def compile_graph(graph: torch.fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
        graph_key = _graph_key(graph)
        dynamic = any(_is_symbolic(value) for value in example_inputs)
        _as_traced(graph)
        compiled = compiler(graph, example_inputs)
        boxed = getattr(compiled, "_boxed_call", False)

        def run(args: list[Any]) -> Any:
            with _lock:
                new, recipe = _admit(graph_key, args, dynamic)
            recipe_id = f"{kind}_{recipe}"
            if not new:
                metrics.dispatcher.publish(metrics.CACHE_HIT, {"recipe_id": recipe_id})
                return run_compiled(compiled, args, boxed)
            started = time.perf_counter_ns()
            out = run_compiled(compiled, args, boxed)
            duration = max(1, (time.perf_counter_ns() - started) // 1000)
            metrics.dispatcher.publish(metrics.CACHE_MISS, {"recipe_id": recipe_id})
            metrics.dispatcher.publish(
                metrics.GRAPH_COMPILATION, {"duration": str(duration), "recipe": recipe_id}
            )
            return out

        run._boxed_call = True  # type: ignore[attr-defined]
        return run

    return compile_graph


def clear() -> None:
    """Forget every recipe (as a new process would), eager ones included; the metrics keep
    their counts."""
    from hpu_emulator import counters

    with _lock:
        _recipes.clear()
        _ranged.clear()
    counters.forget_recipes()


def account(graph_key: str, inputs: Sequence[Any], kind: str, duration_us: int) -> bool:
    """One compiled run of a graph that is not an FX graph (a lazy-mode step, an HPU graph
    capture): a compilation the first time its key and signature are seen, a cache hit
    after. Returns whether it compiled."""
    with _lock:
        new, recipe = _admit(graph_key, inputs, False)
    recipe_id = f"{kind}_{recipe}"
    if not new:
        metrics.dispatcher.publish(metrics.CACHE_HIT, {"recipe_id": recipe_id})
        return False
    metrics.dispatcher.publish(metrics.CACHE_MISS, {"recipe_id": recipe_id})
    metrics.dispatcher.publish(
        metrics.GRAPH_COMPILATION, {"duration": str(max(1, duration_us)), "recipe": recipe_id}
    )
    return True
