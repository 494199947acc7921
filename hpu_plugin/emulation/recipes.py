"""The recipe cache of the emulated Gaudi: what a compiled graph costs in compilations.

On Gaudi, ``hpu_backend`` hands each FX graph (the forward and, when training, the backward
graph that AOT autograd splits off) to the bridge, which compiles a Synapse *recipe* the first
time the graph runs with a given concrete input signature and caches it: a later run with the
same signature is a cache hit, any new shape, dtype or stride is a miss and a compilation
(seconds on hardware). A graph that dynamo traced with symbolic sizes still compiles one
recipe per concrete size. This module models that: the key is the graph's generated code (two
identical graphs share recipes, as the bridge's graph hash does) and, for each input, its
shape, dtype and strides, or the value of an integer (a size dynamo passes as a symbol).
Each miss publishes ``GRAPH_COMPILATION`` (the duration of the first run, in microseconds)
and ``CACHE_MISS``; each hit ``CACHE_HIT`` (see ``metrics.py``).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from hpu_plugin.emulation import metrics

Signature = tuple[Any, ...]

_lock = threading.Lock()
_recipes: set[tuple[str, Signature]] = set()


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


def _graph_key(graph: torch.fx.GraphModule) -> str:
    return hashlib.sha1(graph.code.encode()).hexdigest()[:16]


def counted(compiler: Callable[..., Any], kind: str) -> Callable[..., Any]:
    """Wrap an AOT-autograd compiler (forward or backward) so that every run of what it
    compiled goes through the recipe cache."""

    def compile_graph(graph: torch.fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
        graph_key = _graph_key(graph)
        compiled = compiler(graph, example_inputs)
        boxed = getattr(compiled, "_boxed_call", False)

        def run(args: list[Any]) -> Any:
            key = (graph_key, signature(args))
            with _lock:
                new = key not in _recipes
                if new:
                    _recipes.add(key)
            recipe_id = f"{kind}_{graph_key}_{abs(hash(key[1])) % 10**8}"
            if not new:
                metrics.dispatcher.publish(metrics.CACHE_HIT, {"recipe_id": recipe_id})
                return compiled(args) if boxed else compiled(*args)
            started = time.perf_counter_ns()
            out = compiled(args) if boxed else compiled(*args)
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
    """Forget every recipe (as a new process would); the metrics keep their counts."""
    with _lock:
        _recipes.clear()
