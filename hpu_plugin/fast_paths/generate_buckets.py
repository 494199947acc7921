"""Transformers: shapes bucketed where the host decides them, for compiled models on Gaudi.

Each new input shape of a compiled graph is a graph compilation on Gaudi. Where Transformers
decides a shape (the prompt and batch of ``generate()``, hence ``pipeline()``; the padded
length of a ``Trainer`` batch) this adapter pads it up to the buckets the registry returns
(``hpu_shape_buckets``), and only where padding changes no result:

- ``generate()``: prompts are left-padded with the attention mask (position ids follow the
  mask, so real tokens keep theirs), batches are filled with copies of the first row, and a
  static key-value cache of a bucketed length replaces the dynamic one, so that decoding has
  one shape per bucket. The returned sequences are cut back to what the caller asked for.
- ``Trainer``: see ``trainer_buckets``.

It stays out where the user chose something that decides these shapes (a cache object or
``cache_implementation``, ``pad_to_multiple_of``, a streamer, ...), where padding would change
a result (penalties that read the prompt, beams, returned scores), and for models that are
not compiled. Where a compiled model keeps compiling new shapes without buckets, it says
once which dimension varies and which setting fixes it.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import functools
import inspect
import logging
import types
from collections.abc import Callable, Iterator
from typing import Any

from hpu_plugin import importhook
from hpu_plugin.fast_paths import decoding_loop, inference_graphs
from hpu_plugin.fast_paths.decisions import BUCKETS, buckets
from hpu_plugin.gaudi.shape_buckets import bucket_for
from hpu_plugin.hosts.replacing import stay_out
from hpu_plugin.patching import Patches, is_ours, ours
from hpu_plugin.registry import Registry
from hpu_plugin.reporting import say_once

log = logging.getLogger("hpu_plugin")

HOST = "transformers"
DEVICE_TYPE = "hpu"
SWITCH = BUCKETS
#: Dynamo's default number of graphs per function, and ours while bucketed work runs.
DYNAMO_RECOMPILE_LIMIT = 8
STATIC_RECOMPILE_LIMIT = 64
#: Compilations with new shapes before the recompilation warning.
WARN_AFTER = 3

#: The static cache length of the ``generate()`` call in progress (read by the cache wrapper).
_cache_length: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "hpu_plugin_cache_length", default=None
)

#: generate() arguments that decide the shapes or read the prompt: the user's choice wins.
GENERATE_CHOICES = (
    "past_key_values", "cache", "cache_implementation", "max_cache_len", "streamer",
    "assistant_model", "inputs_embeds", "prefill_chunk_size", "negative_prompt_ids",
    # the user's own processors and criteria read input_ids, which padding lengthens
    "logits_processor", "stopping_criteria", "prefix_allowed_tokens_fn",
)
#: Inputs of a value per prompt token that Transformers' ``generate()`` extends itself as
#: tokens come: padded with 0 (text) where the mask is 0, as a processor pads a batch.
TOKEN_TYPES = ("token_type_ids", "mm_token_type_ids", "moe_mm_token_type_ids")
#: Generation settings under which padding could change the result, with their neutral values.
NEUTRAL_SETTINGS: dict[str, tuple[Any, ...]] = {
    "num_beams": (None, 1),
    "num_return_sequences": (None, 1),
    "return_dict_in_generate": (None, False),
    "repetition_penalty": (None, 1.0),
    "encoder_repetition_penalty": (None, 1.0),
    "no_repeat_ngram_size": (None, 0),
    "encoder_no_repeat_ngram_size": (None, 0),
    "sequence_bias": (None,),
    "bad_words_ids": (None,),
    "force_words_ids": (None,),
    "constraints": (None,),
    "guidance_scale": (None, 1.0),
    "prompt_lookup_num_tokens": (None,),
    "cache_implementation": (None,),
    "max_cache_len": (None,),
    "use_cache": (None, True),
}


# -- facts about the model ------------------------------------------------------------------


def is_compiled(model: Any) -> bool:
    """``model.compile()`` or ``model.forward = torch.compile(model.forward)``."""
    if getattr(model, "_compiled_call_impl", None) is not None:
        return True
    return getattr(vars(model).get("forward"), "_torchdynamo_orig_callable", None) is not None


def max_positions(model: Any) -> int | None:
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    value = getattr(config, "max_position_embeddings", None)
    return value if isinstance(value, int) and value > 0 else None


# -- the compilation counter ----------------------------------------------------------------


def compilations() -> int | None:
    """Gaudi's own count (``metric_global("graph_compilation")``), or None without it."""
    try:
        from habana_frameworks.torch.hpu.metrics import metric_global
    except Exception:
        return None
    metric = metric_global("graph_compilation")
    return None if metric is None else int(dict(metric.stats()).get("TotalNumber", 0))


class RecompileWatch:
    """Notices a compiled model that keeps compiling as one dimension varies; warns once."""

    def __init__(self, where: str, dimension: str) -> None:
        self.where = where
        self.dimension = dimension
        self.sizes: list[int] = []
        self.growing = 0

    def observe(self, before: int | None, size: int, why_unbucketed: str) -> None:
        after = compilations()
        if before is None or after is None or after <= before or size in self.sizes:
            return
        self.sizes.append(size)
        self.growing += 1
        if self.growing >= WARN_AFTER:
            say_once(
                f"recompiling:{self.where}", logging.WARNING,
                "hpu_plugin: %s keeps compiling new graphs (%d so far) as %s varies (%s); %s",
                self.where, after, self.dimension, ", ".join(map(str, self.sizes[:6])),
                why_unbucketed,
            )


@contextlib.contextmanager
def static_graphs() -> Iterator[None]:
    """One static graph per bucket, as Gaudi prefers, while bucketed work runs.

    Dynamo's defaults would trace a second shape as a dynamic-shape graph (Gaudi then still
    compiles a recipe per concrete shape, with the overhead of dynamic shapes) and fall back
    to eager after 8 graphs of one function; with buckets every shape is wanted. Settings
    the user changed from dynamo's defaults are kept.
    """
    import torch._dynamo

    config = torch._dynamo.config
    changes: dict[str, Any] = {}
    if getattr(config, "automatic_dynamic_shapes", None) is True:
        changes["automatic_dynamic_shapes"] = False
    if getattr(config, "recompile_limit", None) == DYNAMO_RECOMPILE_LIMIT:
        changes["recompile_limit"] = STATIC_RECOMPILE_LIMIT
    with config.patch(changes):
        yield


# -- generate() -----------------------------------------------------------------------------


class GeneratePlan:
    """How one ``generate()`` call is padded, and how its result is cut back."""

    def __init__(self, batch: int, length: int, batch_to: int, length_to: int, cache: int,
                 new_tokens: int) -> None:
        self.batch, self.length = batch, length
        self.batch_to, self.length_to = batch_to, length_to
        self.cache, self.new_tokens = cache, new_tokens

    def padded(self) -> int:
        return (self.batch_to * self.length_to) - (self.batch * self.length)


def _setting(name: str, kwargs: dict[str, Any], config: Any) -> Any:
    return kwargs[name] if name in kwargs else getattr(config, name, None)


def _why_not(model: Any, kwargs: dict[str, Any], config: Any) -> str | None:
    """Why this call cannot be padded without changing its result or a user choice."""
    for name in GENERATE_CHOICES:
        if kwargs.get(name) is not None:
            return f"you passed {name}= (your choice decides the shapes)"
    for name, neutral in NEUTRAL_SETTINGS.items():
        value = _setting(name, kwargs, config)
        if not any(value is n or value == n for n in neutral):
            return f"{name}={value!r} is set (padding could change the result)"
    model_config = getattr(model, "config", None)
    if getattr(model_config, "is_encoder_decoder", False):
        return "the model is an encoder-decoder"
    if not _static_cache_graph(model):
        return "the model does not declare that it runs as one graph with a static cache"
    if not _positions_from_mask(model):
        return ("the model's positions do not follow the attention mask (its forward takes "
                "no position_ids): padding would shift them")
    if getattr(model_config, "alibi", False) is True:  # Falcon's: build_alibi_tensor fails
        return "the model's alibi attention does not run with a static cache in Transformers"
    if "prepare_inputs_for_generation" in vars(model):  # PEFT's prompt learning sets one
        return ("the model's prepare_inputs_for_generation is set on the model itself (PEFT "
                "prompt learning): it may not take a static cache")
    if not _takes_cache_position(model):
        return "the model's forward takes no cache_position (Transformers 4.x needs it)"
    return None


def _static_cache_graph(model: Any) -> bool:
    """The model class's own declaration that its forward compiles as one graph with a
    static cache: ``_can_compile_fullgraph`` (Transformers 5, and 4.x releases that have it),
    else 4.x's ``_supports_static_cache``. Transformers' own compile tests read the same
    flags; a model without them (CPM-Ant, RWKV, XLM, ProphetNet) writes past its cache or
    keeps state a graph would replay."""
    cls = type(model)
    flag = getattr(cls, "_can_compile_fullgraph", None)
    if flag is None:
        flag = getattr(cls, "_supports_static_cache", True)
    return bool(flag)


def _positions_from_mask(model: Any) -> bool:
    """Whether left padding leaves the model's positions as they were: ``generate()`` derives
    ``position_ids`` from the attention mask for a forward that takes them; one that does not
    (Marian, Pegasus, BART-style decoders, Bloom) counts positions from the cache's start,
    so the padding the buckets add would move every token."""
    try:
        return "position_ids" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def _takes_cache_position(model: Any) -> bool:
    """Transformers 4.x writes a static cache where ``cache_position`` says; a forward that
    does not name it (5.x's do not: their static layers count for themselves) would write
    elsewhere."""
    from transformers.generation import utils

    if "cache" in getattr(utils, "ALL_CACHE_NAMES", ()):
        return True
    try:
        return "cache_position" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


@functools.cache
def _fresh_max_length() -> Any:
    """A fresh ``GenerationConfig()``'s ``max_length``: 20 on Transformers 4, None on 5."""
    from transformers import GenerationConfig

    return GenerationConfig().max_length


def _new_tokens(kwargs: dict[str, Any], config: Any, length: int) -> int | None:
    """``max_new_tokens`` as the caller meant it; a ``max_length`` counts the prompt, which
    padding lengthens, so it is turned into new tokens (likewise ``min_length``). None where
    no length was given: Transformers then counts its default from the prompt (4.x: a
    ``max_length`` equal to a fresh config's, 20, becomes 20 new tokens), so the call is
    left to it."""
    if _setting("min_new_tokens", kwargs, config) is None and (
        _setting("min_length", kwargs, config) or 0) > 0:
        return None
    new = _setting("max_new_tokens", kwargs, config)
    if new is None:
        max_length = _setting("max_length", kwargs, config)
        if "max_length" not in kwargs and max_length == _fresh_max_length():
            return None
        new = None if max_length is None else max_length - length
    return new if isinstance(new, int) and new > 0 else None


def plan_generate(
    registry: Registry, model: Any, input_ids: Any, kwargs: dict[str, Any]
) -> GeneratePlan | str:
    """The padding of this call, or why there is none."""
    config = inference_graphs.generation_config_of(model, kwargs)
    why = _why_not(model, kwargs, config)
    if why is not None:
        return why
    if getattr(input_ids, "ndim", 0) != 2 or input_ids.dtype.is_floating_point:
        return "the prompt is not a batch of token ids"
    batch, length = (int(n) for n in input_ids.shape)
    new = _new_tokens(kwargs, config, length)
    if new is None:
        return "the number of new tokens is not known before generation"
    limit = max_positions(model)
    length_to = bucket_for(length, buckets(registry, "length", limit))
    if limit is not None and length_to + new > limit >= length + new:
        length_to = limit - new  # the bucket would run past the model's positions
    fill = not (_setting("do_sample", kwargs, config) or _batched_inputs(kwargs, config))
    batch_to = bucket_for(batch, buckets(registry, "batch", None)) if fill else batch
    cache_buckets = buckets(registry, "cache", max(limit or 0, length_to + new))
    if not cache_buckets:
        return f"{SWITCH}=0 or {SWITCH}_CACHE=0 is set"
    cache = bucket_for(length_to + new, cache_buckets)
    return GeneratePlan(batch, length, batch_to, length_to, cache, new)


def _batched_inputs(kwargs: dict[str, Any], config: Any) -> list[str]:
    """The model inputs besides the prompt, its mask and its token types (``pixel_values``,
    ``image_grid_thw``, ``decoder_input_ids``...): a row added to the prompt would have none
    of its own (a copied prompt's image tokens would find no image), so no row is added."""
    import torch

    def holds_tensor(value: Any) -> bool:
        if isinstance(value, torch.Tensor):
            return value.dim() > 0
        if isinstance(value, list | tuple):
            return any(holds_tensor(item) for item in value)
        return isinstance(value, dict) and any(holds_tensor(item) for item in value.values())

    return [name for name, value in kwargs.items() if name not in (
        "input_ids", "attention_mask", *TOKEN_TYPES) and not hasattr(config, name)
        and holds_tensor(value)]


def _pad_token(model: Any, kwargs: dict[str, Any]) -> int:
    config = inference_graphs.generation_config_of(model, kwargs)
    for name in ("pad_token_id", "eos_token_id"):
        value = _setting(name, kwargs, config)
        if isinstance(value, (list, tuple)):
            value = value[0] if value else None
        if hasattr(value, "tolist"):
            value = value.reshape(-1)[0].item()
        if isinstance(value, int):
            return value
    return 0


def pad_prompt(plan: GeneratePlan, rows: dict[str, Any], pad_token: int) -> dict[str, Any]:
    """Left-pad each per-token input to the length bucket (the prompt with ``pad_token``, its
    mask and token types with 0: masked text), then fill the batch with copies of row 0."""
    import torch

    padded, extra = {}, plan.length_to - plan.length
    for name, value in rows.items():
        if extra:
            fill = pad_token if name == "input_ids" else 0
            value = torch.cat([value.new_full((plan.batch, extra), fill), value], dim=1)
        if plan.batch_to > plan.batch:
            value = torch.cat([value, value[:1].expand(plan.batch_to - plan.batch, -1)], dim=0)
        padded[name] = value
    return padded


def _prompt_rows(model: Any, inputs: Any, kwargs: dict[str, Any]) -> dict[str, Any] | str:
    """The prompt, its mask and its token types (the inputs that bucketing pads), or why
    the call cannot be padded."""
    import torch

    input_ids = inputs if inputs is not None else kwargs.get("input_ids")
    if not isinstance(input_ids, torch.Tensor) or input_ids.device.type != DEVICE_TYPE:
        return "the prompt is not a tensor on hpu"
    mask = kwargs.get("attention_mask")
    if mask is None:
        config = inference_graphs.generation_config_of(model, kwargs)
        pad = _setting("pad_token_id", kwargs, config)
        if isinstance(pad, int) and bool((input_ids == pad).any()):
            return "the prompt holds pad tokens and no attention_mask was given"
        mask = torch.ones_like(input_ids)
    elif mask.shape != input_ids.shape:
        return "the attention_mask is not shaped like the prompt"
    rows = {"input_ids": input_ids, "attention_mask": mask}
    for name, value in kwargs.items():  # position_ids, 3-D token types...: not padded here
        per_token = isinstance(value, torch.Tensor) and value.dim() >= 2 and (
            input_ids.shape in (value.shape[:2], value.shape[-2:]))
        if name in TOKEN_TYPES and isinstance(value, torch.Tensor):
            if value.shape != input_ids.shape:
                return f"you passed {name}= shaped {list(value.shape)}, not as the prompt"
            rows[name] = value
        elif per_token and name not in rows:
            return f"you passed {name}= with a value for each token of the prompt"
    return rows


def _fix(why: str, what: str) -> str:
    if SWITCH in why:
        return f"shape buckets are off ({why}): unset {SWITCH} to bucket {what}."
    return (f"hpu-plugin does not bucket them because {why}: pad {what} to a few sizes "
            "yourself, or leave that choice to hpu-plugin.")


def _generation_settings(call: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` as ``generate()`` arguments, or, where the caller passed a
    ``generation_config`` (Transformers warns when both come), set on a copy of it."""
    config = call.get("generation_config")
    if config is None:
        return settings
    config = copy.deepcopy(config)
    config.max_length = config.min_length = None  # already counted into the settings
    for name, value in settings.items():
        setattr(config, name, value)
    return {"generation_config": config}


def _graph_kwargs(model: Any, plan: GeneratePlan, graphs: str | None) -> dict[str, Any] | None:
    if graphs == "eager":
        return inference_graphs.compile_kwargs(model, plan.batch_to, plan.length_to,
                                                 plan.cache)
    if graphs == "lazy":
        return inference_graphs.lazy_kwargs(model, plan.batch_to, plan.length_to, plan.cache)
    return {}


def _bucketed_generate(
    registry: Registry, original: Callable[..., Any], model: Any, inputs: Any,
    kwargs: dict[str, Any], graphs: str | None = None,
) -> tuple[Any, str | None]:
    """Run ``generate()`` padded to buckets; else unpadded, with the reason. With ``graphs``
    (an uncompiled model: ``inference_graphs``) the decoding steps run as graphs: compiled by
    Transformers (``"eager"``), or HPU graphs (``"lazy"``)."""
    prompt = _prompt_rows(model, inputs, kwargs)
    plan = prompt if isinstance(prompt, str) else plan_generate(
        registry, model, prompt["input_ids"], kwargs)
    if isinstance(plan, str) or isinstance(prompt, str):
        return original(model, inputs, **kwargs), plan if isinstance(plan, str) else prompt
    extra = _graph_kwargs(model, plan, graphs)
    if extra is None:
        return original(model, inputs, **kwargs), "the model's graph budget is spent"
    padded = pad_prompt(plan, prompt, _pad_token(model, kwargs))
    input_ids = padded.pop("input_ids")
    call = {k: v for k, v in kwargs.items() if k not in ("max_length", "min_length", *prompt)}
    cache = extra.pop("cache", None)  # lazy mode's kept cache: an argument, not a setting
    if graphs == "eager" and decoding_loop.takes(model, kwargs):
        call["custom_generate"] = decoding_loop.decode
    config = inference_graphs.generation_config_of(model, kwargs)
    # the length as the call gave it: a max_length (the caller's, or the model's generation
    # config's) counted past the padding; Transformers warns at every call where a
    # max_new_tokens comes beside a max_length the model's config has
    settings = ({"max_new_tokens": plan.new_tokens}
                if _setting("max_new_tokens", kwargs, config) is not None
                else {"max_length": plan.length_to + plan.new_tokens})
    settings.update(extra)
    if cache is None:
        settings["cache_implementation"] = "static"
    else:
        call["cache"] = cache
    call.update(_generation_settings(call, settings))
    call.update(padded)
    token = _cache_length.set(plan.cache)
    try:
        with static_graphs(), inference_graphs.graphed(model, graphs):
            try:
                out = original(model, input_ids, **call)
            except decoding_loop.NotThisLoop:
                call.pop("custom_generate")
                out = original(model, input_ids, **call)
    finally:
        _cache_length.reset(token)
    return out[: plan.batch, plan.length_to - plan.length :], None


def _graphed_generate(
    registry: Registry, original: Callable[..., Any], model: Any, inputs: Any,
    kwargs: dict[str, Any], mode: str,
) -> Any:
    """``generate()`` decoded by graphs (``inference_graphs``). In lazy mode one call at a
    time per model (the kept caches and the ``forward`` are the model's): a concurrent call
    runs without graphs. A graph that fails to compile refuses the model, with a warning,
    and the call runs again without graphs; errors of the call's own inputs pass through."""
    lock = inference_graphs.lazy_lock(model) if mode == "lazy" else None
    if lock is not None and not lock.acquire(blocking=False):
        return original(model, inputs, **kwargs)
    try:
        out, why = _bucketed_generate(registry, original, model, inputs, kwargs, graphs=mode)
        if why is not None:
            say_once(("generate-ungraphed", type(model).__name__, why), logging.INFO,
                     "hpu_plugin: generate() of %s runs without graphs: %s",
                     type(model).__name__, why)
        return out
    except inference_graphs.compile_errors() as error:
        inference_graphs.refuse(model, error)
    finally:
        if lock is not None:
            lock.release()
    return original(model, inputs, **kwargs)


def make_generate(registry: Registry, patches: Patches,
                  original: Callable[..., Any]) -> Callable[..., Any]:
    watch = RecompileWatch("generate() with a compiled model",
                           "the prompt length (dimension 1 of input_ids)")

    @functools.wraps(original)
    def generate(self: Any, inputs: Any = None, *args: Any, **kwargs: Any) -> Any:
        device = getattr(self, "device", None)
        if args or getattr(device, "type", None) != DEVICE_TYPE:
            return original(self, inputs, *args, **kwargs)
        if not is_compiled(self):
            mode = inference_graphs.wanted(registry, self, kwargs)
            if mode is None:
                return original(self, inputs, *args, **kwargs)
            inference_graphs.keep_picklable(patches, type(self))
            return _graphed_generate(registry, original, self, inputs, kwargs, mode)
        before = compilations()
        result, why = _bucketed_generate(registry, original, self, inputs, kwargs)
        if why is not None:
            prompt = inputs if inputs is not None else kwargs.get("input_ids")
            size = int(prompt.shape[-1]) if hasattr(prompt, "shape") and prompt.ndim else 0
            watch.observe(before, size, _fix(why, "prompt lengths"))
        return result

    return ours(generate)


def make_prepare_cache(original: Callable[..., Any]) -> Callable[..., Any]:
    """While a bucketed ``generate()`` runs, its static cache gets the bucketed length."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def prepare_cache(*args: Any, **kwargs: Any) -> Any:
        length = _cache_length.get()
        if length is None:
            return original(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        bound.arguments["max_cache_length"] = max(length, bound.arguments["max_cache_length"])
        return original(*bound.args, **bound.kwargs)

    return ours(prepare_cache)


def install_generate(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    cls = getattr(module, "GenerationMixin", None)
    generate = vars(cls).get("generate") if cls is not None else None
    prepare = vars(cls).get("_prepare_cache_for_generation") if cls is not None else None
    if generate is None or prepare is None:
        stay_out(HOST, "shape buckets", "GenerationMixin.generate/_prepare_cache_for_generation")
        return
    if "max_cache_length" not in inspect.signature(prepare).parameters:
        stay_out(HOST, "shape buckets", "max_cache_length in _prepare_cache_for_generation")
        return
    if is_ours(generate):
        return
    patches.set(cls, "_prepare_cache_for_generation", make_prepare_cache(prepare))
    patches.set(cls, "generate", make_generate(registry, patches, generate))


def install(registry: Registry, patches: Patches) -> None:
    """Register the post-import hook of ``generate`` (only with a device ready; the
    Trainer's is ``trainer_buckets.install``)."""
    importhook.when_imported(
        "transformers.generation.utils",
        lambda module: install_generate(registry, patches, module),
    )
