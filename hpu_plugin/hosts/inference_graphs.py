"""Transformers: ``generate()`` (hence ``pipeline()``) of an eager model decoded by graphs.

In eager mode (``PT_HPU_LAZY_MODE=0``, Gaudi's default and this plugin's) every op of every
decoding step is a launch of its own; Gaudi's graph mechanism there is ``torch.compile`` with
``hpu_backend`` (its HPU graphs, ``wrap_in_hpu_graph``, are lazy mode's only: the bridge
exports them only ``if is_lazy()``). Transformers has its own mechanism for this: with a
static key-value cache and a ``compile_config``, ``generate()`` compiles the model's call for
the decoding steps (``get_compiled_call``) and runs the prefill eagerly; it takes it only on
the devices it lists (``_valid_auto_compile_criteria``) unless the config says
``_compile_all_devices``. This adapter asks for exactly that, and the shape buckets
(``shape_buckets``) pad the prompt, the batch and the static cache to buckets, so that the
decoding steps have one graph per bucket.

Taken only for a model on ``hpu`` in eval mode that is not compiled, in eager mode, where
the user chose nothing about compilation or the cache (``compile_config``,
``disable_compile``, ``cache_implementation``, a cache object: their choice wins), and where
the buckets can pad the call without changing its result (``shape_buckets.plan_generate``).
Each model keeps at most ``HPU_PLUGIN_GRAPHS_MAX`` graphs (one per bucket, default 8);
a call that would need another runs as before, eagerly, with a warning once. In lazy mode,
where ``torch.compile`` is not allowed, it stays out: ``wrap_in_hpu_graph`` keys graphs on
the identity of non-tensor arguments, and ``generate()`` passes the model a new static cache
object at every call (docs/fast-paths.md, "Not covered").
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from hpu_plugin import settings
from hpu_plugin.gaudi.fast_paths import GRAPHS_MAX, GRAPHS_MAX_DEFAULT
from hpu_plugin.gaudi.software import DEVICE_TYPE
from hpu_plugin.registry import Registry
from hpu_plugin.reporting import say_once

log = logging.getLogger("hpu_plugin")

NAME = "inference_graphs"
BACKEND = "hpu_backend"
#: The most graphs a budget may allow: each holds a static cache's worth of device memory.
MOST = 1024
#: generate() arguments and generation settings that are the user's choice of compilation.
CHOICES = ("compile_config", "disable_compile", "cache_implementation")
KEYS = "_hpu_plugin_graph_keys"


def graph_budget(environ: Mapping[str, str] = os.environ) -> int:
    """``HPU_PLUGIN_GRAPHS_MAX``: how many graphs (buckets) one model may keep."""
    raw = environ.get(GRAPHS_MAX)
    if raw is None or not raw.strip():
        return GRAPHS_MAX_DEFAULT
    return settings.integer(GRAPHS_MAX, raw, minimum=1, maximum=MOST)


def _lazy() -> bool:
    from hpu_plugin.hosts.fused_training import _lazy

    return _lazy()


def _user_chose(model: Any, kwargs: dict[str, Any]) -> bool:
    config = kwargs.get("generation_config") or getattr(model, "generation_config", None)
    for name in CHOICES:
        if kwargs.get(name) is not None:
            return True
        value = getattr(config, name, None)
        if value is not None and value is not False:
            return True
    return False


def compilable(model: Any) -> bool:
    """Transformers' own exceptions to compiling ``generate()`` (``_valid_auto_compile_
    criteria``): a quantization that cannot be compiled, weights offloaded to CPU or disk.
    There it would not compile, and padding alone would buy nothing."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None and not getattr(quantizer, "is_compileable", False):
        return False
    devices = set(getattr(model, "hf_device_map", {}).values())
    return not ("disk" in devices or ("cpu" in devices and len(devices) > 1))


def wanted(registry: Registry, model: Any, kwargs: dict[str, Any]) -> bool:
    """Whether this ``generate()`` call of an uncompiled model on ``hpu`` is to be graphed:
    in eval mode, eager mode, with nothing about compilation chosen, and the hook agreeing."""
    if getattr(model, "training", True) or _lazy() or _user_chose(model, kwargs):
        return False
    if not hasattr(model, "get_compiled_call"):  # Transformers without its own mechanism
        return False
    if not compilable(model):
        return False
    model_type = getattr(getattr(model, "config", None), "model_type", "")
    return registry.fast_path(NAME, DEVICE_TYPE, {"model": model_type, "mode": "eager"})


def compile_kwargs(model: Any, batch: int, cache: int) -> dict[str, Any] | None:
    """What ``generate()`` is given so that Transformers compiles its decoding steps with
    ``hpu_backend``; None where this bucket would exceed the model's graph budget."""
    from transformers.generation.configuration_utils import CompileConfig

    budget = graph_budget()
    keys: set[tuple[int, int]] = vars(model).setdefault(KEYS, set())
    if (batch, cache) not in keys:
        if len(keys) >= budget:
            say_once(f"graph-budget:{id(model)}", logging.WARNING,
                     "hpu_plugin: this model already has %d graphs for generate() (one per "
                     "bucket), its budget: batch %d with a cache of %d runs eagerly. Raise %s "
                     "(now %d) to graph it too, or use fewer shapes.", len(keys), batch, cache,
                     GRAPHS_MAX, budget)
            return None
        keys.add((batch, cache))
    config = CompileConfig(fullgraph=False, dynamic=False, backend=BACKEND)
    config._compile_all_devices = True  # Transformers' own switch for devices it does not list
    return {"compile_config": config}
