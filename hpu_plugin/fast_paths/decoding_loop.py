"""Transformers 4.57 and 5: greedy ``generate()`` of a graphed model, one graph launch a token.

With ``inference_graphs`` the model's forward of each decoding step is one compiled graph,
but Transformers' loop around it (``GenerationMixin._sample``) still runs op by op, about
fifty launches a token: the inputs grow by a token each step (``input_ids``,
``attention_mask``, ``position_ids``), so they cannot be in a graph of fixed shapes. Gaudi's
own answer (optimum-habana's loop) keeps every input at a fixed shape and writes the new
token at an index. This module does that for the calls it can take, through Transformers'
own hook for a decoding loop (``generate(custom_generate=<callable>)``, which receives the
prepared processors, stopping criteria, generation config and cache): the prefill and the
first token run as Transformers runs them; each later token is one compiled step (the
model's forward, the minimum-length rule, ``argmax``, the end-of-sequence bookkeeping), over
an attention mask as long as the static cache, whose entry for a token is set when the token
is appended (so the mask the model builds is the one Transformers' growing mask gives).

Taken only where that is Transformers' greedy loop exactly: no sampling, no scores or
attentions returned, a static cache of plain layers, logits processors limited to the
minimum-length ones, stopping by length and end-of-sequence only. Anything else runs
Transformers' own ``_sample``, unchanged.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Any

from hpu_plugin.hosts.replacing import host_version
from hpu_plugin.hosts.support import release_key, tested_releases
from hpu_plugin.patching import record_out

BACKEND = "hpu_backend"
#: The first Transformers whose ``generate()`` takes a decoding loop as a callable
#: (``custom_generate=<callable>``): of the version matrix (``hosts.support.MATRIX``) 4.57.6
#: does, 4.51.3 does not. Above the major of the newest tested release the loop stays out:
#: nobody has seen what its ``generate()`` hands a loop.
CALLABLE_LOOP_SINCE = "4.57"
#: model_kwargs the loop knows what to do with, by Transformers' API; any other runs
#: Transformers' loop. 5.x makes position ids in generate(); 4.57 in each step.
KNOWN_KWARGS = {"5": frozenset({"attention_mask", "position_ids", "cache", "use_cache",
                                "logits_to_keep"}),
                "4": frozenset({"attention_mask", "past_key_values", "use_cache",
                                "logits_to_keep"})}
CACHE_NAME = {"5": "cache", "4": "past_key_values"}
#: generate() arguments Transformers hands only to its own loops: with a loop given as a
#: callable it drops them (a ``tokenizer`` for ``stop_strings``, a streamer, an assistant).
LOOP_ARGUMENTS = ("custom_generate", "tokenizer", "assistant_tokenizer", "assistant_model",
                  "streamer", "synced_gpus")
#: GenerationMixin methods whose work the loop does (or calls) for each token.
STOOD_IN_FOR = {"5": ("prepare_inputs_for_generation", "_update_model_kwargs_for_generation",
                      "_prefill"),
                "4": ("prepare_inputs_for_generation", "_update_model_kwargs_for_generation",
                      "_get_initial_cache_position")}
MIN_LENGTH_RULES = ("MinNewTokensLengthLogitsProcessor", "MinLengthLogitsProcessor")
STOPS = ("MaxLengthCriteria", "EosTokenCriteria")


class NotThisLoop(Exception):
    """Raised before any work where the call's mode is not one ``_sample`` decodes (a mode
    Transformers moved to the Hub, which a callable loop would silently replace): the caller
    runs ``generate()`` again without the loop."""


def takes(model: Any, kwargs: dict[str, Any]) -> bool:
    """Whether a ``generate()`` call with these arguments may be given the loop."""
    if api() is None:
        # recorded for info and doctor, not logged: on 4.51 this is how the host is
        record_out("Transformers", "fixed-shape decoding loop", "Transformers "
                   f"{host_version('Transformers')} has no generate(custom_generate=<callable>)"
                   " with the methods the loop stands in for")
        return False
    return not any(kwargs.get(name) is not None for name in LOOP_ARGUMENTS) and not synced(model)


def synced(model: Any) -> bool:
    """Whether ``generate()`` would decode in step with other ranks (DeepSpeed ZeRO-3 or FSDP
    over several processes: ``synced_gpus``), which a loop given as a callable is not told."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return False
    try:
        from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled
        from transformers.integrations.fsdp import is_fsdp_managed_module
    except Exception:
        return True
    return bool(is_deepspeed_zero3_enabled() or is_fsdp_managed_module(model))


def loop_api(version: str) -> str | None:
    """Which API a Transformers release speaks to the loop, by its version alone: ``"5"``,
    ``"4"`` (4.57 and later 4.x), or None (before 4.57, a major above the newest tested,
    or a version that cannot be read)."""
    key, since = release_key(version), release_key(CALLABLE_LOOP_SINCE)
    newest = release_key(tested_releases("transformers")[-1])
    if key is None or since is None or newest is None or key < since or (
            key[0][0] > newest[0][0]):
        return None
    return "5" if key[0][0] >= 5 else "4"


@functools.cache
def api() -> str | None:
    """Which Transformers the loop speaks to: ``"5"`` (a forward takes ``cache=``, static
    layers keep their fill level in a tensor), ``"4"`` (4.57: ``past_key_values=`` and a
    ``cache_position`` from the loop), or None where ``generate()`` takes no loop as a
    callable (4.51, by the installed version: :func:`loop_api`) or a method the loop stands
    in for is missing."""
    version = loop_api(host_version("transformers"))
    if version is None:
        return None
    try:
        from transformers.cache_utils import StaticLayer
        from transformers.generation import utils
    except Exception:
        return None
    mixin = utils.GenerationMixin
    if not isinstance(StaticLayer, type) or not callable(getattr(mixin, "_sample", None)):
        return None
    if version == "5" and "cumulative_length" not in getattr(StaticLayer, "__annotations__", {}):
        return None
    return version if all(callable(getattr(mixin, name, None))
                          for name in STOOD_IN_FOR[version]) else None


def _min_length(processors: Any) -> tuple[int, Any] | bool | None:
    """The length below which end-of-sequence is forbidden, with its ids; None without a
    rule; False where a processor is one the loop does not compute (several minimum-length
    rules are one when they forbid the same ids: the longest wins)."""
    import torch

    limit, ids = None, None
    for processor in processors:
        name = type(processor).__name__
        if name not in MIN_LENGTH_RULES:
            return False
        mine = (processor.prompt_length_to_skip + processor.min_new_tokens
                if name == MIN_LENGTH_RULES[0] else processor.min_length)
        eos = processor.eos_token_id
        if ids is not None and eos is not ids and not (
                isinstance(eos, torch.Tensor) and isinstance(ids, torch.Tensor)
                and eos.shape == ids.shape and bool(torch.equal(eos, ids))):
            return False
        limit, ids = max(int(mine), limit or 0), eos
    return None if limit is None else (limit, ids)


def _fits(model: Any, processors: Any, stops: Any, config: Any, kwargs: dict[str, Any]) -> bool:
    from transformers.cache_utils import StaticCache, StaticLayer

    # beams are another mode (decode refused it); sampling is _sample's but not greedy
    if config.do_sample or config.return_dict_in_generate or model.config.is_encoder_decoder:
        return False
    version = api()
    if version is None or not set(kwargs) <= KNOWN_KWARGS[version] or kwargs.get(
            "attention_mask") is None:
        return False
    # position ids: made only for a forward that takes them (BLOOM's takes none); the cache
    # as a named argument (a forward that drops it would leave the loop without one)
    named = set(inspect.signature(model.forward).parameters)
    if kwargs.get("position_ids") is None if version == "5" else "position_ids" not in named:
        return False
    if not ({"cache"} if version == "5" else {"past_key_values", "cache_position"}) <= named:
        return False
    # a chunked prefill is Transformers' own loop (4.57) or its _prefill's, which sets an
    # environment variable and compiles each chunk: it breaks the loop's graph (5.x)
    if getattr(config, "prefill_chunk_size", None) is not None:
        return False
    # the loop stands in for these: a model with its own, on its class or the instance
    # (Phi-3's drops the cache past its original length, multimodal models feed images at
    # the prefill, PEFT's prompt learning sets one on the model) keeps Transformers'
    from transformers.generation.utils import GenerationMixin

    if any(getattr(getattr(model, name, None), "__func__", None)
           is not getattr(GenerationMixin, name, None) for name in STOOD_IN_FOR[version]):
        return False
    cache = kwargs.get(CACHE_NAME[version])
    if type(cache) is not StaticCache or any(type(layer) is not StaticLayer
                                             for layer in cache.layers):
        return False
    if any(type(stop).__name__ not in STOPS for stop in stops) or stops.max_length is None:
        return False
    # the tokens are written into a buffer as wide as the cache
    if stops.max_length > cache.layers[0].max_cache_len:
        return False
    return _min_length(processors) is not False


def _rule(scores: Any, length: Any, min_length: Any, forbidden_ids: Any) -> Any:
    """The minimum-length processors' rule: end-of-sequence forbidden below the limit."""
    import torch

    if min_length is None:
        return scores
    vocab = torch.arange(scores.shape[-1], device=scores.device)
    forbidden = torch.isin(vocab, forbidden_ids) & (length < min_length)
    return torch.where(forbidden, -torch.inf, scores)


def _opening(model: Any, version: str, input_ids: Any, config: Any, kwargs: dict[str, Any],
             width: int, eos: Any, pad: Any, min_length: Any, forbidden_ids: Any
             ) -> tuple[Any, ...]:
    """The prefill, its token and the loop's state, traced into one graph per bucket: what
    ``_sample`` does up to the first decoding step (the static cache is filled here, its
    tensors made on the device inside the graph). Returns the sequence so far in a buffer
    as wide as the cache (the steps write their tokens into it), and the state ``_step``
    takes."""
    import torch

    length = input_ids.shape[1]
    outputs, kwargs = _prefill(model, version, input_ids, config, kwargs)
    scores = _rule(outputs.logits[:, -1].to(copy=True, dtype=torch.float32),
                   torch.tensor(length, device=input_ids.device), min_length, forbidden_ids)
    chosen = torch.argmax(scores, dim=-1)
    unfinished = torch.ones(input_ids.shape[0], dtype=torch.long, device=input_ids.device)
    if pad is not None:
        chosen = chosen * unfinished + pad * (1 - unfinished)
        unfinished = unfinished & ~torch.isin(chosen, eos)
    rows = input_ids.shape[0]
    sequence = torch.cat([input_ids, chosen[:, None],
                          input_ids.new_zeros((rows, width - length - 1))], dim=1)
    mask = kwargs["attention_mask"]  # with the chosen token's entry (the update's)
    if version == "5":  # the update appended the chosen token's position
        position = kwargs["position_ids"][..., -1:].clone(memory_format=torch.contiguous_format)
    else:  # 4.57 counts it from the mask in each step: the ones so far, less one
        position = mask.long().sum(-1, keepdim=True) - 1
    mask = torch.cat([mask, mask.new_zeros((rows, width - mask.shape[1]))], dim=1)
    return (sequence, chosen, position, mask, unfinished,
            torch.tensor(length + 1, device=input_ids.device), unfinished.max() == 0)


def _step(model: Any, cache: Any, version: str, sequence: Any, token: Any, position: Any,
          mask: Any, unfinished: Any, length: Any, eos: Any, pad: Any, min_length: Any,
          forbidden_ids: Any) -> tuple[Any, ...]:
    """One decoding step, traced into one graph: what ``_sample`` does for a token. The
    token fed is the ``length``-th, at cache index ``length - 1`` (4.57 is told it); the
    token chosen is written into ``sequence`` at index ``length``."""
    import torch

    where = ({"cache": cache} if version == "5" else
             {"past_key_values": cache, "cache_position": (length - 1).reshape(1)})
    logits = model(input_ids=token, attention_mask=mask, position_ids=position, use_cache=True,
                   return_dict=True, **where).logits
    scores = _rule(logits[:, -1].to(dtype=torch.float32), length, min_length, forbidden_ids)
    chosen = torch.argmax(scores, dim=-1)
    if pad is not None:
        chosen = chosen * unfinished + pad * (1 - unfinished)
        unfinished = unfinished & ~torch.isin(chosen, eos)
    # the appended token's entry in the sequence and the mask (the last one appended
    # needs no mask entry: clamped)
    sequence.index_copy_(1, length.reshape(1), chosen[:, None])
    column = torch.clamp(length, max=mask.shape[1] - 1).reshape(1)
    mask = mask.index_fill(1, column, 1)
    return chosen, position + 1, mask, unfinished, length + 1, unfinished.max() == 0


def _compiled(function: Any) -> Any:
    """Made at each call: ``torch.compile`` looks the backend up when it is called, and the
    graphs dynamo keeps for ``function`` are reused by every wrapper of the same backend."""
    import torch

    return torch.compile(function, backend=BACKEND, dynamic=False, fullgraph=False)


def decode(model: Any, input_ids: Any, logits_processor: Any, stopping_criteria: Any,
           generation_config: Any, **model_kwargs: Any) -> Any:
    """The decoding loop given to ``generate(custom_generate=...)``: Transformers' greedy
    loop with fixed shapes, or Transformers' own ``_sample`` where it does not fit. A
    callable loop is given no ``synced_gpus`` nor streamer (``takes`` keeps such calls
    away); anything else Transformers passes is in ``model_kwargs``, which ``_fits``
    refuses and ``_sample`` receives."""
    from transformers.generation.utils import GENERATION_MODES_MAPPING

    if GENERATION_MODES_MAPPING.get(generation_config.get_generation_mode(None)) != "_sample":
        raise NotThisLoop
    if not _fits(model, logits_processor, stopping_criteria, generation_config, model_kwargs):
        return type(model)._sample(model, input_ids, logits_processor=logits_processor,
                                   stopping_criteria=stopping_criteria,
                                   generation_config=generation_config, **model_kwargs)
    optimize = getattr(model, "_optimize_model_for_decode", contextlib.nullcontext)
    with optimize():
        return _greedy(model, input_ids, logits_processor, stopping_criteria,
                       generation_config, model_kwargs)


def _greedy(model: Any, input_ids: Any, processors: Any, stops: Any, config: Any,
            kwargs: dict[str, Any]) -> Any:
    import torch

    pad = config._pad_token_tensor
    has_eos = any(hasattr(stop, "eos_token_id") for stop in stops)
    if has_eos and pad is None:
        raise ValueError("generate(): an end-of-sequence token is set but no pad_token_id; "
                         "set generation_config.pad_token_id")
    version = api()
    eos = next((stop.eos_token_id for stop in stops if hasattr(stop, "eos_token_id")), None)
    rule = _min_length(processors)
    minimum, forbidden_ids = None, None
    if rule:
        minimum, forbidden_ids = torch.tensor(rule[0], device=input_ids.device), rule[1]
    cache = kwargs[CACHE_NAME[version]]
    width = cache.layers[0].max_cache_len
    sequence, chosen, *state, done = _compiled(_opening)(
        model, version, input_ids, config, kwargs, width, eos, pad if has_eos else None,
        minimum, forbidden_ids)
    # while the minimum-length rule forbids the end-of-sequence ids the stopping criterion
    # looks for, no row can end: the host need not read whether all have
    limit = rule[0] if rule and rule[1] is eos else None

    def may_end(length: int) -> bool:
        return has_eos and not (limit is not None and length < limit)

    length = input_ids.shape[1] + 1
    steps = stops.max_length - length
    if steps <= 0 or (may_end(length - 1) and bool(done)):
        return sequence[:, :length]
    step = _compiled(_step)
    for _ in range(steps):
        chosen, *state, done = step(model, cache, version, sequence, chosen[:, None], *state,
                                    eos, pad if has_eos else None, minimum, forbidden_ids)
        length += 1
        if may_end(length - 1) and bool(done):
            break
    return sequence[:, :length]


def _prefill(model: Any, version: str | None, input_ids: Any, config: Any,
             kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The prefill, as Transformers' own loop runs it, and the inputs it leaves for the
    first decoding step."""
    if version == "5":
        outputs = model._prefill(input_ids, config, kwargs, is_first_iteration=True)
    else:
        kwargs = model._get_initial_cache_position(input_ids.shape[1], input_ids.device, kwargs)
        inputs = model.prepare_inputs_for_generation(input_ids, **kwargs)
        outputs = model(**inputs, return_dict=True)
    kwargs = model._update_model_kwargs_for_generation(outputs, kwargs, is_encoder_decoder=False)
    return outputs, kwargs
