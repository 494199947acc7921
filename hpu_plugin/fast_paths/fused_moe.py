"""Mixture-of-experts layers of Transformers 5 models by Gaudi's fused MoE kernel
(``torch.ops.hpu.mixture_of_experts``, the one optimum-habana's Mixtral and Qwen-MoE call).

Transformers 5 runs every MoE layer through its own registry (``ExpertsInterface``,
``ALL_EXPERTS_FUNCTIONS`` in ``transformers/integrations/moe.py``): the experts module's
``forward`` asks it for ``config._experts_implementation`` at each call, and each entry is a
function ``(experts, hidden_states [tokens, hidden], top_k_index, top_k_weights) -> [tokens,
hidden]``. This module registers one more entry, :data:`NAME`, and makes it the Gaudi default
for a model that names no ``experts_implementation``, in place of the host adapter's
``batched_mm`` (``hosts.transformers_adapter.install_experts``), when the ``fused_moe`` fast
path is on. A name the user gave is kept.

The entry runs the kernel only where it computes what ``batched_mm`` computes (:func:`fits`):
experts with Transformers' default gate (``act(gate) * up`` of a concatenated ``gate_up_proj``)
and an activation the kernel has (SiLU, ReLU), no biases, no norm after the experts, no
expert parallelism, weights and activations of one floating dtype on ``hpu``, outside
autocast, and no gradient wanted: the bridge registers the op for the HPU key only, with no
autograd formula (``TORCH_LIBRARY_IMPL(hpu, HPU, m)`` in ``habana_eager/
eager_custom_op_register.cpp``; no ``Autograd`` kernel, no hpex autograd function), so a
training step keeps ``batched_mm``. Everything else (GPT-OSS with its biases and clamped gate,
training, CPU tensors) runs Transformers' ``batched_mm`` function, as with the fast path off.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

from hpu_plugin.fast_paths.decisions import take
from hpu_plugin.gaudi.software import DEVICE_TYPE
from hpu_plugin.hosts.replacing import stay_out
from hpu_plugin.hosts.transformers_adapter import DEFAULT_EXPERTS, GAUDI_EXPERTS
from hpu_plugin.patching import Patches, ours
from hpu_plugin.registry import Registry

HOST = "transformers"
ADAPTER = "fused mixture of experts"
FAST_PATH = "fused_moe"
#: The entry in Transformers' ``ALL_EXPERTS_FUNCTIONS`` (a user may name it too).
NAME = "hpu_fused_moe"
#: The host function the entry falls back to, where the kernel does not fit.
FALLBACK = GAUDI_EXPERTS
#: Marks our ``get_correct_experts_implementation`` (the adapter's goes over it, or under it).
MARK = "_hpu_plugin_fused_moe"


def activation_of(act_fn: Any) -> str | None:
    """The kernel's name for the experts' activation, None where it has none.

    The bridge's kernel takes ``"gelu"``, ``"relu"`` and ``"silu"`` (``activationModeMap`` in
    ``hpu_ops/backend/mixture_of_experts.cpp``). GELU is left out: the hardware kernel's
    form (exact or tanh) is not documented, and Transformers has both under several names.
    """
    import torch

    if isinstance(act_fn, (*_HOST["silu"], torch.nn.SiLU)):
        return "silu"
    if isinstance(act_fn, torch.nn.ReLU):
        return "relu"
    return None


#: What the entry compares with, looked up once where it is installed: Transformers' SiLU
#: class and its default gate (a release without them keeps ``batched_mm``, said once).
_HOST: dict[str, Any] = {"silu": (), "gate": None}


def _default_gate(experts: Any) -> bool:
    gate = _HOST["gate"]
    return gate is not None and getattr(type(experts), "_apply_gate", None) is gate


def fits(experts: Any, hidden_states: Any, top_k_index: Any, top_k_weights: Any) -> str | None:
    """The kernel's activation name where the kernel gives ``batched_mm``'s result for this
    call, else None."""
    import torch

    if hidden_states.device.type != DEVICE_TYPE or hidden_states.dim() != 2:
        return None
    if not hidden_states.shape[0] or torch.is_autocast_enabled(DEVICE_TYPE):
        return None
    layout = (getattr(experts, "has_gate", False), getattr(experts, "is_concatenated", False),
              getattr(experts, "has_bias", True), getattr(experts, "has_post_expert_norm", True),
              getattr(experts, "_is_expert_parallel", True))
    if layout != (True, True, False, False, False) or not _default_gate(experts):
        return None
    gate_up, down = getattr(experts, "gate_up_proj", None), getattr(experts, "down_proj", None)
    if not (isinstance(gate_up, torch.Tensor) and isinstance(down, torch.Tensor)):
        return None
    if type(gate_up) not in (torch.Tensor, torch.nn.Parameter) or gate_up.dim() != 3:
        return None  # quantized or sharded weights: their own functions
    dtype = hidden_states.dtype
    # not float16: the kernel runs every expert on every token and weighs the unchosen by 0,
    # so an unchosen expert that overflows float16's range makes 0 * inf = NaN, where
    # batched_mm never computes it (bf16 and float32 have float32's range)
    if dtype not in (torch.float32, torch.bfloat16):
        return None
    if gate_up.dtype != dtype or down.dtype != dtype or not top_k_weights.is_floating_point():
        return None
    if top_k_index.dtype != torch.int64:  # the bridge scatters by it: ATen takes int64 only
        return None
    # no autograd formula for the op: only where nothing asks for a gradient
    if torch.is_grad_enabled() and (hidden_states.requires_grad or gate_up.requires_grad
                                    or down.requires_grad or top_k_weights.requires_grad):
        return None
    return activation_of(getattr(experts, "act_fn", None))


def fused_experts(experts: Any, hidden_states: Any, top_k_index: Any, top_k_weights: Any,
                  activation: str) -> Any:
    """The kernel's call for Transformers' layout: ``gate_up_proj`` ``[E, 2I, H]`` is the
    kernel's permuted (``nn.Linear``-like, ``[out, in]``) fused ``w12`` split on dim 0 into
    gate and up, ``down_proj`` ``[E, H, I]`` its permuted ``w3``; transposed experts
    (``[E, H, 2I]``, ``[E, I, H]``) are its unpermuted layout, split on dim 1. The router
    weights go in the activations' dtype: the bridge scatters them into a tensor of it."""
    import torch

    permuted = not getattr(experts, "is_transposed", False)
    return torch.ops.hpu.mixture_of_experts.fused_weights(
        hidden_states, top_k_index, top_k_weights.to(hidden_states.dtype),
        list(experts.gate_up_proj.unbind(0)), list(experts.down_proj.unbind(0)),
        permuted, activation, 0, experts.gate_up_proj.shape[0] - 1,
    )


def make_experts(registry: Registry, fallback: Callable[..., Any]) -> Callable[..., Any]:
    """The registry entry: the kernel where it fits and the fast path is taken, else
    ``fallback`` (Transformers' ``batched_mm`` function)."""
    import torch

    # Asked at each eager call, as the fused attention is, so that turning the switch off is
    # obeyed. In a graph (the decoding steps of generate()) it is asked as the graph is made,
    # every plugin included, and the answer is kept in the graph as a constant: dynamo runs
    # the function rather than tracing pluggy's call.
    @torch.compiler.assume_constant_result
    def taken(model: str) -> bool:
        return take(registry, FAST_PATH, {"model": model})

    @functools.wraps(fallback)
    def hpu_fused_moe_experts_forward(experts: Any, hidden_states: Any, top_k_index: Any,
                                      top_k_weights: Any) -> Any:
        activation = fits(experts, hidden_states, top_k_index, top_k_weights)
        if activation is not None and taken(type(experts).__name__):
            return fused_experts(experts, hidden_states, top_k_index, top_k_weights,
                                 activation)
        return fallback(experts, hidden_states, top_k_index, top_k_weights)

    return ours(hpu_fused_moe_experts_forward)


def install_entry(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    """:data:`NAME` in Transformers' experts registry (5.x; 4.x has none: nothing said)."""
    interface = getattr(module, "ExpertsInterface", None)
    mapping = getattr(interface, "_global_mapping", None)
    if not isinstance(mapping, dict):
        return
    fallback = mapping.get(FALLBACK)
    if fallback is None:
        stay_out(HOST, ADAPTER, f"ExpertsInterface._global_mapping[{FALLBACK!r}]")
        return
    gate = getattr(module, "_default_apply_gate", None)
    try:
        from transformers.activations import SiLUActivation
    except ImportError:
        gate = None
    if gate is None:
        stay_out(HOST, ADAPTER, "integrations.moe._default_apply_gate and "
                 "activations.SiLUActivation")
        return
    _HOST.update(silu=(SiLUActivation,), gate=gate)
    if NAME in mapping:
        return
    mapping[NAME] = make_experts(registry, fallback)

    def undo() -> None:
        # models made meanwhile name this entry in their config: it stays, as the plain
        # batched_mm it falls back to, so that they go on running without the plugin
        mapping[NAME] = fallback

    patches.on_undo(undo, f"transformers ExpertsInterface[{NAME!r}]")


def install_choice(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    """A model that names no ``experts_implementation`` gets :data:`NAME` on Gaudi with the
    fast path on. Over or under the adapter's own wrapper of the same method: what it gives
    an unnamed model (``batched_mm``, or Transformers' ``grouped_mm`` beneath it) is
    replaced; a name the user gave never is."""
    cls = getattr(module, "PreTrainedModel", None)
    inner = vars(cls).get("get_correct_experts_implementation") if cls is not None else None
    mapping = getattr(getattr(module, "ALL_EXPERTS_FUNCTIONS", None), "_global_mapping", None)
    if inner is None or not isinstance(mapping, dict):
        return  # 4.x, or a release the adapter already named as stayed out
    if getattr(inner, MARK, False):
        return

    @functools.wraps(inner)
    def get_correct_experts_implementation(self: Any, requested_experts: str | None) -> str:
        chosen = inner(self, requested_experts)
        if (requested_experts is None and chosen in (DEFAULT_EXPERTS, GAUDI_EXPERTS)
                and NAME in mapping and registry.device_available()
                and take(registry, FAST_PATH, {"model": type(self).__name__})):
            return NAME
        return chosen

    # marked as this fast path's, not as the plugin's (``ours``): the fast paths are installed
    # before the host adapters, whose wrapper of this method must still go over it
    setattr(get_correct_experts_implementation, MARK, True)
    patches.set(cls, "get_correct_experts_implementation", get_correct_experts_implementation)


def install(registry: Registry, patches: Patches) -> None:
    from hpu_plugin import importhook

    importhook.when_imported("transformers.integrations.moe",
                             lambda module: install_entry(registry, patches, module))
    importhook.when_imported("transformers.modeling_utils",
                             lambda module: install_choice(registry, patches, module))
