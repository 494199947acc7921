"""Transformers models on Gaudi: attention by hpex ``FusedSDPA``, RMSNorm by ``FusedRMSNorm``,
rotary embeddings by the hpex rotary helper (:mod:`hpu_plugin.fast_paths.fused_rope`).

Attention goes through Transformers' own registry: every model with ``attn_implementation=
"sdpa"`` (the default) asks ``AttentionInterface`` for ``"sdpa"`` at each call, so the entry
is re-registered with a function that runs ``FusedSDPA`` for ``hpu`` tensors and
Transformers' own function for everything else, or where the fused kernel would not give its
result (dropout, whose random numbers differ, ``softcap``, ``position_bias``, ``s_aux``, a
sliding window, attention weights asked for).

RMSNorm has no registry a host can use without the ``kernels`` package and a Hub download
(Transformers' ``use_kernel_forward_from_hub`` is a no-op without it), so the norm layers of
a model are given ``FusedRMSNorm`` as their instance's ``forward`` when the model enters
Gaudi work through ``Trainer`` or ``generate()``; the class and the model code are left as
they are. Only classes whose arithmetic is Llama's (``weight * x / rms(x)``, ``eps`` in
``variance_epsilon``) are taken: :data:`RMS_NORMS`.
"""

from __future__ import annotations

import functools
import logging
import types
import weakref
from collections.abc import Callable
from typing import Any

from hpu_plugin.fast_paths import fused_rope
from hpu_plugin.fast_paths.decisions import take
from hpu_plugin.gaudi.software import DEVICE_TYPE
from hpu_plugin.hosts.replacing import stay_out
from hpu_plugin.patching import Patches, is_ours, ours
from hpu_plugin.registry import Registry
from hpu_plugin.reporting import say_once

log = logging.getLogger("hpu_plugin")

HOST = "transformers"
ADAPTER = "fused attention and norms"

#: RMSNorm classes whose forward is Llama's: ``weight * (x.float() * rsqrt(mean(x^2) + eps))
#: .to(dtype)``. Gemma's (``1 + weight``) and OLMo 2's (weight before the cast) are not.
RMS_NORMS = frozenset({
    "LlamaRMSNorm", "MistralRMSNorm", "MixtralRMSNorm", "Qwen2RMSNorm", "Qwen2MoeRMSNorm",
    "Qwen3RMSNorm", "Qwen3MoeRMSNorm", "Phi3RMSNorm",
})
#: Arguments of an attention call that the fused kernel does not compute as Transformers does.
UNFUSED_KWARGS = ("softcap", "position_bias", "s_aux", "sliding_window", "output_attentions")


@functools.cache
def _fused_sdpa() -> Any | None:
    try:
        from habana_frameworks.torch.hpex.kernels import FusedSDPA
    except Exception:
        return None
    return FusedSDPA


def _autocast() -> bool:
    import torch

    return bool(torch.is_autocast_enabled(DEVICE_TYPE))


def _bool() -> Any:
    import torch

    return torch.bool


def _compiling() -> bool:
    """Inside a ``torch.compile`` trace the graph compiler fuses; a hook call there would
    break the graph, so compiled models keep Transformers' attention and norms."""
    import torch

    return bool(torch.compiler.is_compiling())


def _autocast_dtype() -> Any | None:
    """The dtype autocast runs SDPA in on Gaudi (it is on the bridge's lower-precision list,
    ``hpu_ops/autocast_helpers.h``), or ``None`` outside autocast."""
    import torch

    return torch.get_autocast_dtype(DEVICE_TYPE) if _autocast() else None


def _fits(query: Any, key: Any, value: Any, attention_mask: Any, dropout: float,
          kwargs: dict[str, Any]) -> bool:
    import torch

    if query.device.type != DEVICE_TYPE or dropout or _compiling():
        return False
    # a mask that learns (Swin's and BEiT's relative position bias is added to it) needs its
    # gradient, and the kernel's backward gives none for the mask
    if (attention_mask is not None and attention_mask.requires_grad
            and torch.is_grad_enabled()):
        return False
    # the kernel takes one dtype (and a mask of it, or a boolean one); under autocast the
    # floating inputs are first cast to the autocast dtype, as torch's SDPA casts them
    dtypes = {query.dtype, key.dtype, value.dtype}
    if attention_mask is not None and attention_mask.dtype != _bool():
        dtypes.add(attention_mask.dtype)
    if _autocast():
        dtypes = {_autocast_dtype()}
    if len(dtypes) != 1:
        return False
    # identity, not ==: T5 passes position_bias as a tensor
    return all(kwargs.get(k) is None or kwargs.get(k) is False for k in UNFUSED_KWARGS)


def make_attention(registry: Registry, original: Callable[..., Any]) -> Callable[..., Any]:
    """Transformers' ``sdpa`` attention, run by ``FusedSDPA`` where it gives the same result."""

    @functools.wraps(original)
    def sdpa_attention_forward(module: Any, query: Any, key: Any, value: Any,
                               attention_mask: Any, dropout: float = 0.0,
                               scaling: float | None = None, is_causal: bool | None = None,
                               **kwargs: Any) -> tuple[Any, None]:
        fits = _fits(query, key, value, attention_mask, dropout, kwargs)
        fused = _fused_sdpa() if fits else None
        if fused is None or not take(
                registry, "fused_sdpa", {"model": type(module).__name__}):
            return original(module, query, key, value, attention_mask, dropout=dropout,
                            scaling=scaling, is_causal=is_causal, **kwargs)
        return fused_attention(fused, module, query, key, value, attention_mask, scaling,
                               is_causal)

    return ours(sdpa_attention_forward)


def fused_attention(fused: Any, module: Any, query: Any, key: Any, value: Any,
                    attention_mask: Any, scaling: float | None, is_causal: bool | None) -> Any:
    """Transformers' ``sdpa_attention_forward`` with ``FusedSDPA`` for torch's SDPA: grouped
    key-value heads and boolean masks (True keeps) go to the kernel as they are, as it takes
    them."""
    low = _autocast_dtype()
    if low is not None:  # what autocast does to torch's SDPA: every floating input to ``low``
        query, key, value = query.to(low), key.to(low), value.to(low)
        if attention_mask is not None and attention_mask.is_floating_point():
            attention_mask = attention_mask.to(low)
    q_length, kv_length = query.shape[2], key.shape[2]
    if attention_mask is not None and attention_mask.ndim == 4:  # 4.5x: a static cache's mask
        attention_mask = attention_mask[:, :, :, :kv_length]
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(q_length > 1 and attention_mask is None and causal)
    if causal and kv_length > q_length:  # prefill into an empty static cache
        key, value = key[:, :, :q_length, :], value[:, :, :q_length, :]
    output = fused.apply(query, key, value, attention_mask, 0.0, causal, scaling)
    return output.transpose(1, 2).contiguous(), None


# -- RMSNorm --------------------------------------------------------------------------------


@functools.cache
def _fused_rms_norm() -> Any | None:
    try:
        from habana_frameworks.torch.hpex.normalization import FusedRMSNorm
    except Exception:
        return None
    return FusedRMSNorm


def fused_rms_forward(self: Any, hidden_states: Any) -> Any:
    """Llama's RMSNorm by the kernel: in float32 one launch; in another dtype the kernel
    normalises in float32 (unit weight) and the weight multiplies after the cast, as there.
    Bound to the norm instance, so a deep copy of the model is bound to its own copy."""
    import torch

    # _compiling() first: dynamo would otherwise trace into the cached kernel look-up
    if hidden_states.device.type != DEVICE_TYPE or _compiling():
        return type(self).forward(self, hidden_states)
    weight, fused = self.weight, _fused_rms_norm()
    if fused is None:
        return type(self).forward(self, hidden_states)
    if hidden_states.dtype == weight.dtype == torch.float32:
        return fused.apply(hidden_states, weight, self.variance_epsilon)
    unit = torch.ones_like(weight, dtype=torch.float32)
    normed = fused.apply(hidden_states.float(), unit, self.variance_epsilon)
    return weight * normed.to(hidden_states.dtype)


#: A bound method pickles as ``getattr(layer, its function's name)``: named ``forward``, a
#: model saved whole (``torch.save(model)``, pickle) loads with each layer's class
#: ``forward``, and runs as Transformers wrote it where hpu-plugin is not installed.
fused_rms_forward.__name__ = "forward"


def fused_forward(norm: Any) -> types.MethodType:
    """:func:`fused_rms_forward` bound to one norm layer, as its instance's ``forward``.

    A bound method, not another callable, so that a model compiled whole or in regions
    compiles one graph for all its layers: Dynamo guards a layer's own bound ``forward`` by
    its function, shared by every layer, and any other callable by its identity, which would
    compile each layer again. A deep copy of the model is bound to the copy's layer and
    keeps the kernel."""
    return types.MethodType(fused_rms_forward, norm)


def _fused(norm: Any) -> bool:
    bound = vars(norm).get("forward")
    return isinstance(bound, types.MethodType) and bound.__func__ is fused_rms_forward


def _forward_is_the_class_own(norm: Any) -> bool:
    """No ``forward`` of the instance's own, or its class's bound to it (what a model saved
    with the kernel loads with): a ``forward`` set by the user is theirs and stays."""
    bound = vars(norm).get("forward")
    return bound is None or (
        isinstance(bound, types.MethodType) and bound.__func__ is type(norm).forward
        and bound.__self__ is norm
    )


#: Models already looked at, and how many of their norm layers took the kernel (kept off the
#: model, whose state a save would carry to where the kernel may not be).
_fused_counts: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def fuse_norms(registry: Registry, patches: Patches, model: Any) -> int:
    """Give the model's Llama-style RMSNorm layers the fused kernel; how many have it.
    Each layer's ``forward`` goes through ``patches``: undoing the plugin gives the layers
    their class's ``forward`` again."""
    if model in _fused_counts:
        return _fused_counts[model]
    if _fused_rms_norm() is None:
        return 0
    layers = [m for m in model.modules() if type(m).__name__ in RMS_NORMS
              and hasattr(m, "variance_epsilon") and getattr(m, "weight", None) is not None]
    candidates = [m for m in layers if m.weight.device.type == DEVICE_TYPE]
    given = sum(1 for m in candidates if _fused(m))
    norms = [m for m in candidates if _forward_is_the_class_own(m)]
    if norms and take(registry, "fused_rms_norm",
                      {"model": getattr(model.config, "model_type", "")}):
        for norm in norms:
            patches.set_on_instance(norm, "forward", fused_forward(norm))
        given += len(norms)
    if layers and not candidates:
        return given  # not on the Gaudi yet (run on the CPU first): looked at again later
    if not _fused_counts:
        patches.on_undo(_fused_counts.clear, "fused RMSNorm: the models looked at")
    _fused_counts[model] = given
    return given


# -- installing -----------------------------------------------------------------------------


def install_attention(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    interface = getattr(module, "AttentionInterface", None)
    mapping = getattr(interface, "_global_mapping", None)
    original = mapping.get("sdpa") if isinstance(mapping, dict) else None
    if original is None:
        stay_out(HOST, ADAPTER, "AttentionInterface._global_mapping['sdpa']")
        return
    if is_ours(original):
        return
    mapping["sdpa"] = make_attention(registry, original)
    patches.on_undo(lambda: mapping.__setitem__("sdpa", original),
                    "transformers AttentionInterface['sdpa']")


MARK = "_hpu_plugin_fused_norms"


def _norms_at(registry: Registry, patches: Patches, method: Callable[..., Any],
              model_of: Callable[[Any], Any]) -> Callable[..., Any]:
    """``method`` that first gives the model its fused RMSNorm and rotary embeddings."""

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        model = None
        try:
            model = model_of(self)
            if model is not None:
                fuse_norms(registry, patches, model)
        except Exception as exc:  # a fast path: never break the user's call
            say_once("fused-norms-failed", logging.WARNING,
                     "hpu_plugin: the fused RMSNorm is off: %r", exc)
        try:
            if model is not None:
                fused_rope.fuse_rope(registry, patches, model)
        except Exception as exc:
            say_once("fused-rope-failed", logging.WARNING,
                     "hpu_plugin: the fused rotary embedding is off: %r", exc)
        return method(self, *args, **kwargs)

    setattr(run, MARK, True)
    return run


def _wrap(registry: Registry, patches: Patches, module: types.ModuleType, owner: str,
          name: str, model_of: Callable[[Any], Any]) -> None:
    cls = getattr(module, owner, None)
    method = vars(cls).get(name) if cls is not None else None
    if method is None:
        stay_out(HOST, ADAPTER, f"{owner}.{name}")
    elif not getattr(method, MARK, False):
        patches.set(cls, name, _norms_at(registry, patches, method, model_of))


def install(registry: Registry, patches: Patches) -> None:
    from hpu_plugin import importhook

    def hook(adapter: Callable[..., None]) -> Callable[[types.ModuleType], None]:
        return lambda module: adapter(registry, patches, module)

    importhook.when_imported("transformers.modeling_utils", hook(install_attention))
    importhook.when_imported("transformers.generation.utils", lambda module: _wrap(
        registry, patches, module, "GenerationMixin", "generate", lambda model: model))

    def trainer(module: types.ModuleType) -> None:
        # evaluation too: a Trainer that evaluates before it trains prepares its model then
        for name in ("train", "evaluate", "predict"):
            _wrap(registry, patches, module, "Trainer", name, lambda trainer: trainer.model)

    importhook.when_imported("transformers.trainer", trainer)
