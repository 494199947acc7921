"""Rotary embeddings of Transformers models on Gaudi by the fused kernel (``fused_rope``).

Every Llama-style attention of Transformers calls the module-level function
``apply_rotary_pos_emb(q, k, cos, sin)`` of its own modeling module by its global name.
Transformers has no registry for it that takes ``hpu``: its hub-kernel decorator is a no-op
without the ``kernels`` package, and ``kernels.kernelize`` refuses the device type. So the
plugin rebinds that name, in the modeling module of a model that enters Gaudi work
(``Trainer.train()`` or ``generate()`` on ``hpu``, where the fused RMSNorm is given), to a
dispatcher: ``hpu`` calls that fit run hpex ``RotaryPosEmbeddingHelperV2``, every other
call runs the module's own function unchanged. Only modules whose ``apply_rotary_pos_emb``
and ``rotate_half`` have the code of Llama's own (compared as code objects, taken from
``modeling_llama`` before anything is rebound) are taken: Transformers copies them verbatim
into Mistral, Qwen2/3, Mixtral, Gemma and others; Phi-3, GPT-NeoX, OLMo 2 and the rest,
whose code differs, keep theirs. The rebinding goes through :class:`Patches`, so undoing
the plugin puts the module's function back.
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

from hpu_plugin.fast_paths.decisions import take
from hpu_plugin.gaudi.software import DEVICE_TYPE
from hpu_plugin.hosts.replacing import stay_out
from hpu_plugin.patching import Patches, is_ours, ours
from hpu_plugin.registry import Registry
from hpu_plugin.reporting import say_once

log = logging.getLogger("hpu_plugin")

HOST = "transformers"
ADAPTER = "fused rotary embeddings"
NAME = "apply_rotary_pos_emb"
HELPER = "rotate_half"
REFERENCE = "transformers.models.llama.modeling_llama"
_rebinding = threading.Lock()
#: The model attribute that caches the names of its modeling modules that can be taken.
MODULES = "_hpu_plugin_rope_modules"


def _code(function: Any) -> tuple[Any, ...] | None:
    """What makes two functions compute the same: bytecode, constants (the docstring
    among them), global names, argument names and defaults; not file or line."""
    code = getattr(function, "__code__", None)
    if code is None:
        return None
    return (code.co_code, code.co_consts, code.co_names, code.co_varnames,
            getattr(function, "__defaults__", None), getattr(function, "__kwdefaults__", None))


def original(function: Any) -> Any:
    """The module's own function behind our dispatcher (itself where it is not ours)."""
    return getattr(function, "__wrapped__", function) if is_ours(function) else function


def _shipped(function: Any) -> bool:
    """Whether ``function`` is the one ``modeling_llama.py`` defines (by its module and
    file): a replacement bound there by someone else must not become the reference."""
    code = getattr(function, "__code__", None)
    return (getattr(function, "__module__", None) == REFERENCE and code is not None
            and code.co_filename.replace("\\", "/").endswith("/llama/modeling_llama.py"))


@functools.cache
def llama_code() -> tuple[tuple[Any, ...] | None, tuple[Any, ...] | None] | None:
    """The code of Llama's ``apply_rotary_pos_emb`` and ``rotate_half`` as this Transformers
    ships them: the reference every other module is compared with."""
    try:
        llama = importlib.import_module(REFERENCE)
    except Exception as exc:
        say_once("fused-rope-reference", logging.WARNING,
                 "hpu_plugin: the fused rotary embedding is off: %s cannot be imported (%r)",
                 REFERENCE, exc)
        return None
    apply, helper = original(vars(llama).get(NAME)), vars(llama).get(HELPER)
    if not (_shipped(apply) and _shipped(helper)):
        # a function put there by the user or another library is theirs, not the reference
        stay_out(HOST, ADAPTER, f"{REFERENCE}.{NAME} and {HELPER} as Transformers ships them")
        return None
    if _code(apply) is None or _code(helper) is None:
        stay_out(HOST, ADAPTER, f"{REFERENCE}.{NAME} and {HELPER} as functions")
        return None
    return _code(apply), _code(helper)


def is_llamas(module: types.ModuleType | None) -> bool:
    """Does ``module`` define ``apply_rotary_pos_emb`` and ``rotate_half`` as Llama does?"""
    namespace = getattr(module, "__dict__", None)
    if not isinstance(namespace, dict) or NAME not in namespace:
        return False
    reference = llama_code()
    return reference is not None and (
        _code(original(namespace[NAME])), _code(namespace.get(HELPER))) == reference


@functools.cache
def _helper() -> Any | None:
    try:
        from habana_frameworks.torch.hpex.kernels import RotaryPosEmbeddingHelperV2
    except Exception:
        return None
    return RotaryPosEmbeddingHelperV2


def _dtypes() -> tuple[Any, ...]:
    """Gaudi's floating dtypes (no float64: the kernel would compute it in float32)."""
    import torch

    return (torch.float32, torch.bfloat16, torch.float16)


def _rope_fits(q: Any, k: Any, cos: Any, sin: Any, rest: tuple[Any, ...],
               kwargs: dict[str, Any]) -> bool:
    """A call the kernel computes as Llama's function: ``hpu``, eager, one floating dtype of
    Gaudi's (under autocast: one for the query and key, one for the tables), ``cos``/``sin``
    gathered by position (``[batch, seq, dim]``, the batch 1 or the query's, no gradient
    wanted) and unsqueezed at dim 1 (the default)."""
    import torch

    # _compiling() first: dynamo would otherwise trace into the checks and the kernel
    # look-up; the graph compiler fuses the ops of a compiled model itself
    if torch.compiler.is_compiling() or rest or set(kwargs) - {"unsqueeze_dim"}:
        return False
    if kwargs.get("unsqueeze_dim", 1) != 1 or q.device.type != DEVICE_TYPE:
        return False
    tensors = (q, k, cos, sin)
    if torch.is_autocast_enabled(DEVICE_TYPE):
        # autocast leaves the query and key in its dtype and the tables in float32; the
        # kernel then computes in float32 (the bridge's helper matches the dtypes so), as
        # the kernel does for optimum-habana's models under autocast
        if q.dtype != k.dtype or cos.dtype != sin.dtype or not {q.dtype, cos.dtype} <= set(
                _dtypes()):
            return False
    elif len({t.dtype for t in tensors}) != 1 or q.dtype not in _dtypes():
        return False
    if any(t.device != q.device for t in tensors):
        return False
    if cos.requires_grad or sin.requires_grad or q.dim() != 4 or k.dim() != 4:
        return False
    if cos.dim() != 3 or sin.shape != cos.shape:
        return False
    batch, seq, dim = cos.shape
    return (dim % 2 == 0 and batch in (1, q.shape[0]) and k.shape[0] == q.shape[0]
            and q.shape[2] == k.shape[2] == seq and q.shape[3] == k.shape[3] == dim)


def fused_rope(helper: Any, q: Any, k: Any, cos: Any, sin: Any) -> tuple[Any, Any]:
    """Llama's ``apply_rotary_pos_emb`` by the kernel, in the call form the Gaudi bridge tests
    for ``RotaryPosEmbeddingHelperV2`` (its ``test_hpu_rotary_pos_embedding_helper.py``):
    a table ``[1, 1, rows, dim]`` with ``position_ids`` ``[batch, seq]`` that pick its rows,
    the batch of the query (2 there, with a table of ``seq`` rows), as optimum-habana calls
    it with the model's position table. Transformers hands over cos and sin already gathered
    (``[batch, seq, dim]``, or ``[1, seq, dim]`` for one row of positions shared by the
    batch), so they become that table as they are (a view), and the ids count its rows. The
    bridge tests no call without ``position_ids`` where cos is not broadcast along the
    sequence, so that form is not used. The kernel computes ``q * cos + rotate_half(q) *
    sin`` in that order (the bridge documents it so), the backward its transpose: in float32
    the values of Llama's function, forward and backward."""
    import torch

    batch, seq, dim = cos.shape
    ids = torch.arange(batch * seq, device=q.device).view(batch, seq)
    if batch != q.shape[0]:
        ids = ids.expand(q.shape[0], seq).contiguous()
    cos_table = cos.reshape(1, 1, batch * seq, dim)
    sin_table = sin.reshape(1, 1, batch * seq, dim)
    return (helper.apply(q, cos_table, sin_table, ids),
            helper.apply(k, cos_table, sin_table, ids))


def make_rope(registry: Registry, function: Callable[..., Any]) -> Callable[..., Any]:
    """The dispatcher bound in the module's place of ``function``: the fused kernel where it
    fits and the fast path is on (asked at each ``hpu`` call, as ``fused_sdpa`` is, so the
    switch turned off later is obeyed), ``function`` itself for everything else."""
    module = getattr(function, "__module__", "")

    @functools.wraps(function)
    def apply_rotary_pos_emb(q: Any, k: Any, cos: Any, sin: Any, *rest: Any,
                             **kwargs: Any) -> Any:
        if not _rope_fits(q, k, cos, sin, rest, kwargs):
            return function(q, k, cos, sin, *rest, **kwargs)
        helper = _helper()
        if helper is None or not take(registry, "fused_rope", {"module": module}):
            return function(q, k, cos, sin, *rest, **kwargs)
        return fused_rope(helper, q, k, cos, sin)

    return ours(apply_rotary_pos_emb)


def _on_hpu(model: Any) -> bool:
    parameters = getattr(model, "parameters", None)
    if parameters is None:
        return False
    return any(p.device.type == DEVICE_TYPE for p in parameters())


def _modules_of(model: Any) -> tuple[str, ...]:
    """The modeling modules of the model's layers whose rotary functions are Llama's."""
    cached = getattr(model, MODULES, None)
    if cached is not None:
        return tuple(cached)
    names = sorted({type(layer).__module__ for layer in model.modules()})
    taken = tuple(name for name in names if is_llamas(sys.modules.get(name)))
    setattr(model, MODULES, taken)
    return taken


def _is_transformers_own(function: Any) -> bool:
    return (function is not None and not is_ours(function)
            and str(getattr(function, "__module__", "")).startswith("transformers."))


def fuse_rope(registry: Registry, patches: Patches, model: Any) -> list[str]:
    """Rebind ``apply_rotary_pos_emb`` in the model's Llama-style modeling modules to the
    dispatcher, once per module, where the fast path is on; the modules rebound now. Only
    Transformers' own function is rebound: one the user bound there, before or after the
    plugin's, is theirs and stays."""
    if not hasattr(model, "modules") or not _on_hpu(model):
        return []
    unbound = [sys.modules[name] for name in _modules_of(model)
               if name in sys.modules and _is_transformers_own(vars(sys.modules[name]).get(NAME))]
    model_type = getattr(getattr(model, "config", None), "model_type", "")
    if not unbound or _helper() is None or not take(registry, "fused_rope", {"model": model_type}):
        return []
    rebound = []
    with _rebinding:  # two threads starting work at once must not wrap a module twice
        for module in unbound:
            if _is_transformers_own(vars(module).get(NAME)):
                patches.set(module, NAME, make_rope(registry, vars(module)[NAME]))
                rebound.append(module.__name__)
    return rebound
