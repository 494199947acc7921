"""Transformers: ``generate()`` (hence ``pipeline()``) of an uncompiled model decoded by graphs.

In eager mode (``PT_HPU_LAZY_MODE=0``, Gaudi's default and this plugin's) every op of every
decoding step is a launch of its own; Gaudi's graph mechanism there is ``torch.compile`` with
``hpu_backend`` (its HPU graphs, ``wrap_in_hpu_graph``, are lazy mode's only: the bridge
exports them only ``if is_lazy()``). Transformers has its own mechanism for this: with a
static key-value cache and a ``compile_config``, ``generate()`` compiles the model's call for
the decoding steps (``get_compiled_call``) and runs the prefill eagerly; it takes it only on
the devices it lists (``_valid_auto_compile_criteria``) unless the config says
``_compile_all_devices``. This adapter asks for exactly that, and the shape buckets
(``generate_buckets``) pad the prompt, the batch and the static cache to buckets, so that the
decoding steps have one graph per bucket.

Taken only for a model on ``hpu`` in eval mode that is not compiled, where
the user chose nothing about compilation or the cache (``compile_config``,
``disable_compile``, ``cache_implementation``, a cache object: their choice wins), and where
the buckets can pad the call without changing its result (``generate_buckets.plan_generate``).
Each model keeps graphs for at most ``HPU_PLUGIN_GRAPHS_MAX`` buckets (padded batch, prompt
length and cache length; default 8);
a call that would need another runs as before, eagerly, with a warning once.

In lazy mode (``PT_HPU_LAZY_MODE=1``: ``torch.compile`` is not allowed there) the graphs are
HPU graphs: the model's ``forward`` is, for the call, the bridge's ``wrap_in_hpu_graph_func``
of it (a graph per input signature, ``max_graphs`` twice the budget: a prefill and a decoding
graph per bucket). Those graphs are keyed on the identity of non-tensor arguments, and
Transformers 5's ``generate()`` makes a new static cache object at every call, so each bucket
keeps one cache, emptied before each call and passed as ``generate(cache=...)``; 4.x keeps its
static cache on the model and empties it itself. Not taken where the model already has a
``forward`` of its own (the user's ``wrap_in_hpu_graph``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import threading
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

from hpu_plugin.fast_paths.decisions import BY_NAME, GRAPHS_MAX, take
from hpu_plugin.gaudi import tuning
from hpu_plugin.patching import Patches, is_ours, ours
from hpu_plugin.registry import Registry
from hpu_plugin.reporting import say_once

log = logging.getLogger("hpu_plugin")

NAME = "inference_graphs"
BACKEND = "hpu_backend"
#: The most graphs a budget may allow: each holds a static cache's worth of device memory.
MOST = tuning.GRAPHS_MOST
#: generate() arguments and generation settings that are the user's choice of compilation.
CHOICES = ("compile_config", "disable_compile", "cache_implementation")
SWITCH = BY_NAME[NAME].setting


@dataclasses.dataclass
class _Graphs:
    """What one model's graphs keep between ``generate()`` calls. Held beside the model, not
    in it: a model is copied, pickled and saved with its instance state, and a lock, a graph
    wrapper or a kept cache has no place there (nor where the plugin is absent)."""

    keys: set[tuple[int, ...]] = dataclasses.field(default_factory=set)
    refused: bool = False
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    forward: Any = None  # lazy mode: the bridge's HPU-graph wrapper of the model's forward
    caches: dict[tuple[int, int], Any] = dataclasses.field(default_factory=dict)


_graphs: weakref.WeakKeyDictionary[Any, _Graphs] = weakref.WeakKeyDictionary()
_graphs_guard = threading.Lock()


def _of(model: Any) -> _Graphs:
    with _graphs_guard:
        state = _graphs.get(model)
        if state is None:
            state = _graphs[model] = _Graphs()
        return state


def graph_budget(environ: Mapping[str, str] = os.environ) -> int:
    """``HPU_PLUGIN_GRAPHS_MAX``: how many graphs (buckets) one model may keep."""
    return tuning.graph_budget(environ)


def _lazy() -> bool:
    from hpu_plugin.fast_paths.fused_training import _lazy

    return _lazy()


def _defaults() -> dict[str, Any]:
    """A fresh ``GenerationConfig``'s values of ``CHOICES``: Transformers 4.51 gives every
    config a ``CompileConfig()``, which is no choice of the user's."""
    from transformers import GenerationConfig

    fresh = GenerationConfig()
    return {name: getattr(fresh, name, None) for name in CHOICES}


def generation_config_of(model: Any, kwargs: dict[str, Any]) -> Any:
    """The generation config a ``generate()`` call runs by: the caller's, else the model's."""
    return kwargs.get("generation_config") or getattr(model, "generation_config", None)


def _user_chose(model: Any, kwargs: dict[str, Any]) -> bool:
    config = generation_config_of(model, kwargs)
    defaults = _defaults()
    for name in CHOICES:
        if kwargs.get(name) is not None:
            return True
        value = getattr(config, name, None)
        if value is None or value is False:
            continue
        if not _same(value, defaults[name]):
            return True
    return False


def _contrastive(model: Any, kwargs: dict[str, Any]) -> bool:
    """Contrastive search (``penalty_alpha > 0`` with ``top_k > 1``, as Transformers chooses
    the mode): Transformers 4.x runs it on a cache it turns into tuples and crops, which a
    static cache cannot be; 5.x has moved it to the Hub. It runs as Transformers wrote it."""
    config = generation_config_of(model, kwargs)

    def setting(name: str) -> Any:
        value = kwargs.get(name)
        return getattr(config, name, None) if value is None else value

    alpha, top_k = setting("penalty_alpha"), setting("top_k")
    return (isinstance(alpha, int | float) and alpha > 0 and isinstance(top_k, int)
            and top_k > 1)


def _same(value: Any, default: Any) -> bool:
    """Equal, attributes set on the instance included (``_compile_all_devices`` is a class
    attribute that a user sets on their ``CompileConfig``)."""
    return bool(value == default) and getattr(value, "__dict__", None) == getattr(
        default, "__dict__", None)


def compilable(model: Any) -> bool:
    """Transformers' own exceptions to compiling ``generate()`` (``_valid_auto_compile_
    criteria``): a quantization that cannot be compiled, weights offloaded to CPU or disk.
    There it would not compile, and padding alone would buy nothing."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None and not getattr(quantizer, "is_compileable", False):
        return False
    devices = set(getattr(model, "hf_device_map", {}).values())
    return not ("disk" in devices or ("cpu" in devices and len(devices) > 1))


def full_attention_only(model: Any) -> bool:
    """Whether every layer of the model's static cache is a plain one. Transformers' sliding
    and chunked static layers (``StaticSlidingWindowLayer``, hybrid and linear-attention
    layers) keep their fill level in a Python int and branch on it: a compiled step would be
    compiled again at every token, and an HPU graph would replay the branch of its capture
    (wrong tokens). Layer types as Transformers infers them (``get_layer_types_and_kwargs``)."""
    config = getattr(model, "config", None)
    try:
        config = config.get_text_config(decoder=True)
    except Exception:
        return False
    types = getattr(config, "layer_types", None)
    if types is None:
        sliding = getattr(config, "sliding_window", None) is not None and getattr(
            config, "use_sliding_window", True) is not False
        chunked = getattr(config, "attention_chunk_size", None) is not None
        return not (sliding or chunked)
    return all(kind == "full_attention" for kind in types)


def fixed_rope(model: Any) -> bool:
    """Whether the model's rotary embeddings are the same at every step. Dynamic and
    LongRoPE scaling pick their frequencies from the longest position seen
    (``dynamic_rope_update``): a graph would keep the choice of its first step."""
    for module in model.modules():
        kind = getattr(module, "rope_type", None)
        kinds = kind.values() if isinstance(kind, dict) else [kind]
        if any(isinstance(k, str) and ("dynamic" in k or k == "longrope") for k in kinds):
            return False
    return True


#: What Transformers 4.x's ``generate()`` keeps on the model when it compiles the decoding
#: steps: its ``torch.compile`` of ``__call__`` (which pickle cannot store), the config it
#: was made with, and the static cache (device tensors that ``model.cpu()`` does not move).
KEPT_BY_GENERATE = ("_compiled_call", "_last_compile_config", "_cache")


def keep_picklable(patches: Patches, cls: type) -> None:
    """Leave what ``generate()`` keeps for its graphs out of the pickled state of ``cls``'s
    models, as torch leaves out its own compiled call (``Module.__getstate__`` drops
    ``_compiled_call_impl``): ``pickle.dumps(model)``, ``copy.deepcopy`` and
    ``torch.save(model)`` work after a graphed ``generate()``, and a saved model loads where
    there is no Gaudi. A copy makes its own when it generates."""
    if is_ours(vars(cls).get("__getstate__")):
        return
    original = cls.__getstate__

    def __getstate__(self: Any) -> Any:
        state = original(self)
        if isinstance(state, dict) and any(key in state for key in KEPT_BY_GENERATE):
            state = {key: value for key, value in state.items() if key not in KEPT_BY_GENERATE
                     or (key == "_cache" and not type(value).__module__.startswith(
                         "transformers."))}  # a "_cache" of the user's own stays
        return state

    patches.set(cls, "__getstate__", ours(__getstate__))


def cache_argument() -> bool:
    """Whether this Transformers' ``generate()`` takes a cache object as ``cache=`` (5.x;
    4.x names it ``past_key_values`` and refuses ``cache`` as an unused model argument)."""
    from transformers.generation import utils

    return "cache" in getattr(utils, "ALL_CACHE_NAMES", ())


def refuse(model: Any, error: BaseException) -> None:
    """A graph of this model failed to compile: warn once, and never graph it again."""
    _of(model).refused = True
    say_once(f"graph-failed:{type(model).__qualname__}", logging.WARNING,
             "hpu_plugin: compiling the decoding steps of %s for generate() failed (%s: %s); "
             "it runs without graphs. Set %s=0 to stop trying.", type(model).__qualname__,
             type(error).__name__, str(error).splitlines()[0] if str(error) else "", SWITCH)


def compile_errors() -> tuple[type[BaseException], ...]:
    """What torch raises when a compiled call fails to compile (not the user's inputs: an
    error of the model's own code is re-raised by dynamo as itself)."""
    from torch._dynamo import exc

    return tuple(getattr(exc, name) for name in ("BackendCompilerFailed",
                                                 "InternalTorchDynamoError")
                 if isinstance(getattr(exc, name, None), type))


def wanted(registry: Registry, model: Any, kwargs: dict[str, Any]) -> str | None:
    """How this ``generate()`` call of an uncompiled model on ``hpu`` is to be graphed
    (``"eager"``: compiled; ``"lazy"``: HPU graphs), or None: in eval mode, with nothing about
    compilation chosen (nor a ``forward`` of the user's own, in lazy mode), the hook agreeing."""
    state = _graphs.get(model)  # looked up, not made: most models are never graphed
    if (getattr(model, "training", True) or (state is not None and state.refused)
            or _user_chose(model, kwargs) or _contrastive(model, kwargs)):
        return None
    if not (full_attention_only(model) and fixed_rope(model)) or has_module_hooks(model):
        return None
    mode = "lazy" if _lazy() else "eager"
    if mode == "eager" and not (hasattr(model, "get_compiled_call") and compilable(model)):
        return None
    if mode == "lazy" and (vars(model).get("forward") is not None or _hpu_graph_func() is None
                           or (getattr(model, "tp_size", None) or 1) > 1):
        # a tensor-parallel model's forward runs collectives, which the bridge refuses
        # inside an HPU graph capture ("collective nonSFG is not supported during hpu
        # graph capturing")
        return None
    model_type = getattr(getattr(model, "config", None), "model_type", "")
    if not take(registry, NAME, {"model": model_type, "mode": mode}):
        return None
    return mode


#: The hook tables of ``torch.nn.Module``, its own and the global ones.
_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def has_module_hooks(model: Any) -> bool:
    """Whether a module hook is in place (the user's on ``lm_head``, say): a replayed HPU
    graph runs no Python, and Dynamo does not guard on hooks added after it compiled
    (``skip_nnmodule_hook_guards``), so graphs would skip it. Such a model runs eagerly.

    Transformers' own output-capturing hooks do not count: installed once, the first time a
    forward is asked for hidden states or attentions (LLaVA's vision tower, every call),
    they stay, and do nothing unless that forward collects; when it does, it collects inside
    the graph being traced or captured, as Transformers' own compiled ``generate()`` does."""
    from torch.nn.modules import module as nn_module

    if any(getattr(nn_module, f"_global{name}", None) for name in _HOOKS):
        return True
    return any(not _captures_outputs(hook) for m in model.modules() for name in _HOOKS
               for hook in (getattr(m, name, None) or {}).values())


def _captures_outputs(hook: Any) -> bool:
    return (getattr(hook, "__module__", None) == "transformers.utils.output_capturing"
            and getattr(hook, "__name__", None) == "output_capturing_hook")


def _admit(model: Any, key: tuple[int, ...], budget: int) -> bool:
    """Whether bucket ``key`` is within the model's graph budget (counting it if new)."""
    keys = _of(model).keys
    if key in keys:
        return True
    if len(keys) >= budget:
        say_once(f"graph-budget:{id(model)}", logging.WARNING,
                 "hpu_plugin: this model already has graphs for %d buckets of generate(), its "
                 "budget: the bucket %s runs eagerly. Raise %s (now %d) to graph it too, or use "
                 "fewer shapes.", len(keys), key, GRAPHS_MAX, budget)
        return False
    keys.add(key)
    return True


def compile_kwargs(model: Any, batch: int, length: int, cache: int) -> dict[str, Any] | None:
    """What ``generate()`` is given so that Transformers compiles its decoding steps with
    ``hpu_backend``; None where this bucket would exceed the model's graph budget. A bucket
    is counted with its prompt length, as in lazy mode: the decoding loop compiles its
    prefill once per padded prompt length."""
    from transformers.generation.configuration_utils import CompileConfig

    if not _admit(model, (batch, length, cache), graph_budget()):
        return None
    config = CompileConfig(fullgraph=False, dynamic=False, backend=BACKEND)
    config._compile_all_devices = True  # Transformers' own switch for devices it does not list
    return {"compile_config": config}


def _hpu_graph_func() -> Any | None:
    try:
        from habana_frameworks.torch.hpu.graphs import wrap_in_hpu_graph_func
    except Exception:
        return None
    return wrap_in_hpu_graph_func


def _weak_forward(model: Any) -> Any:
    """The class's ``forward`` of ``model``, holding it weakly: the side table holds this,
    and a strong reference would keep every model that ever generated alive."""
    ref, forward = weakref.ref(model), type(model).forward

    def call(*args: Any, **kwargs: Any) -> Any:
        return forward(ref(), *args, **kwargs)

    return call


def lazy_kwargs(model: Any, batch: int, length: int, cache: int) -> dict[str, Any] | None:
    """Lazy mode: the static cache of this bucket, kept across calls (``wrap_in_hpu_graph``
    keys its graphs on the identity of the cache object, and ``generate()`` would make a new
    one every call), emptied for this call; None over the budget."""
    budget = graph_budget()
    if not _admit(model, (batch, length, cache), budget):
        return None
    state = _of(model)
    if state.forward is None:  # a prefill and a decoding graph per bucket
        state.forward = _hpu_graph_func()(_weak_forward(model), max_graphs=2 * budget)
    if not cache_argument():  # 4.x keeps its static cache on the model and resets it
        return {}
    kept = state.caches.get((batch, cache))
    if kept is None:
        from transformers import StaticCache

        config = model.config.get_text_config(decoder=True)
        kept = state.caches[(batch, cache)] = StaticCache(config=config, max_cache_len=cache)
    elif kept.is_initialized:
        kept.reset()
    return {"cache": kept}


def lazy_lock(model: Any) -> threading.Lock:
    """One per model: lazy mode's kept caches and the instance ``forward`` are the model's,
    so one ``generate()`` at a time uses them; a concurrent one runs without graphs."""
    return _of(model).lock


@contextlib.contextmanager
def graphed(model: Any, mode: str | None) -> Iterator[None]:
    """Lazy mode: the model's ``forward`` replays its HPU graphs for the call (on this
    thread), and is the class's own again afterwards."""
    state = _graphs.get(model)
    if mode != "lazy" or state is None or state.forward is None:
        yield
        return
    graph, owner = state.forward, threading.get_ident()
    plain = type(model).forward.__get__(model)

    # with the class forward's signature: Transformers passes ``position_ids`` (numbered from
    # the attention mask) and ``logits_to_keep`` only to a forward that names them
    @functools.wraps(plain)
    def forward(*args: Any, **kwargs: Any) -> Any:
        # a concurrent generate() on another thread runs the class's forward
        return (graph if threading.get_ident() == owner else plain)(*args, **kwargs)

    model.forward = forward
    try:
        yield
    finally:
        vars(model).pop("forward", None)
