"""``hpu::mixture_of_experts`` (and ``.fused_weights``): a mixture-of-experts MLP block.

Semantics of the bridge's own eager reference (``mixture_of_experts_common`` in
``eager_custom_op_register.cpp``), which optimum-habana's Mixtral, Qwen-MoE and DeepSeek
layers call: for every expert ``e`` (the index into ``w1``/``w2``/``w3``), ``h = act(x @ W1)
* (x @ W2)`` and ``out += (h @ W3) * r[:, e]``, where ``r`` scatters ``router_weights`` to
the experts named by ``expert_routing_table`` (``[tokens, k]``). ``permuted_weights=True``
means the weights are stored ``[out, in]`` as in ``nn.Linear``. ``activation`` is ``gelu``,
``relu`` or ``silu``. ``experts_min``/``experts_max`` only steer the hardware kernel (the
bridge's eager path ignores them too). ``fused_weights`` passes ``W1`` and ``W2``
concatenated (on dim 0 when permuted, else dim 1). ``router_weights`` must have
``hidden_states``' dtype and the routing table must be int64, as the bridge's scatter of the
one by the other requires. As there, every product is taken in ``hidden_states``' dtype
(each matmul and product rounded to it, the accumulation of the experts in it too).

The ``.fp8_measurement`` overloads (the same with a trailing ``measurement_mode``) also
return, for each expert, the largest value of ``act(x @ W1) * (x @ W2)`` over all tokens,
routed or not, as a float32 tensor on the host: the bridge's eager kernel fills a CPU tensor
(``torch::zeros({num_experts}, kFloat32)``). The bridge v1.19.0 registers them in its
eager library only (its lazy library declares the two forms above), and so does the emulator.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from hpu_emulator.kernels.checks import expect, expect_same_lengths

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": F.gelu, "relu": F.relu, "silu": F.silu,
}


def _experts(hidden_states: torch.Tensor, expert_routing_table: torch.Tensor,
             router_weights: torch.Tensor, w1: list[torch.Tensor], w2: list[torch.Tensor],
             w3: list[torch.Tensor], permuted_weights: bool, activation: str,
             measure: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    op = "mixture_of_experts"
    expect(activation in ACTIVATIONS,
           f"{op}: activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    expect(hidden_states.dim() == 2,
           f"{op}: hidden_states must be [tokens, hidden], got {list(hidden_states.shape)}; "
           "flatten the batch first")
    expect(expert_routing_table.shape == router_weights.shape,
           f"{op}: expert_routing_table {list(expert_routing_table.shape)} and router_weights "
           f"{list(router_weights.shape)} must have one shape")
    # The bridge scatters router_weights into a tensor of hidden_states' dtype with the
    # routing table as the index (``torch::zeros(..., hidden_states.options()).scatter_``):
    # ATen's scatter_ refuses another dtype for either.
    expect(router_weights.dtype == hidden_states.dtype,
           f"{op}: router_weights must have hidden_states' dtype {hidden_states.dtype}, got "
           f"{router_weights.dtype}; cast them (optimum-habana does) before the call")
    expect(expert_routing_table.dtype == torch.int64,
           f"{op}: expert_routing_table must be int64 (torch.topk's indices), got "
           f"{expert_routing_table.dtype}")
    expect_same_lengths(op, w1=w1, w2=w2, w3=w3)
    experts = len(w1)
    expect(experts > 0, f"{op}: needs at least one expert")
    table = expert_routing_table.to(torch.int64)
    if table.numel():
        expect(int(table.min()) >= 0 and int(table.max()) < experts,
               f"{op}: expert_routing_table names experts outside 0..{experts - 1}")
    act = ACTIVATIONS[activation]
    tokens = hidden_states.shape[0]
    x = hidden_states
    padded = torch.zeros(tokens, experts, dtype=x.dtype, device=x.device).scatter_(
        -1, table, router_weights)
    out = torch.zeros_like(x)
    peaks = []
    for e in range(experts):
        a, b, c = (w[e].t() if permuted_weights else w[e] for w in (w1, w2, w3))
        both = act(torch.matmul(x, a)) * torch.matmul(x, b)
        if measure:
            peaks.append(torch.amax(both).to(torch.float32))
        out += torch.matmul(both, c) * padded[:, e:e + 1]
    amax = torch.stack(peaks).cpu() if measure else torch.zeros(0)
    return out, amax


def mixture_of_experts(hidden_states: torch.Tensor, expert_routing_table: torch.Tensor,
                       router_weights: torch.Tensor, w1: list[torch.Tensor],
                       w2: list[torch.Tensor], w3: list[torch.Tensor], permuted_weights: bool,
                       activation: str, experts_min: int, experts_max: int) -> torch.Tensor:
    return _experts(hidden_states, expert_routing_table, router_weights, w1, w2, w3,
                    permuted_weights, activation)[0]


def mixture_of_experts_measured(hidden_states: torch.Tensor, expert_routing_table: torch.Tensor,
                                router_weights: torch.Tensor, w1: list[torch.Tensor],
                                w2: list[torch.Tensor], w3: list[torch.Tensor],
                                permuted_weights: bool, activation: str, experts_min: int,
                                experts_max: int, measurement_mode: bool
                                ) -> tuple[torch.Tensor, torch.Tensor]:
    return _experts(hidden_states, expert_routing_table, router_weights, w1, w2, w3,
                    permuted_weights, activation, measure=True)


def _split(w12: list[torch.Tensor], permuted_weights: bool
           ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    dim = 0 if permuted_weights else 1
    halves = [w.split(w.shape[dim] // 2, dim) for w in w12]
    return [h[0] for h in halves], [h[1] for h in halves]


def mixture_of_experts_fused_measured(hidden_states: torch.Tensor,
                                      expert_routing_table: torch.Tensor,
                                      router_weights: torch.Tensor, w12: list[torch.Tensor],
                                      w3: list[torch.Tensor], permuted_weights: bool,
                                      activation: str, experts_min: int, experts_max: int,
                                      measurement_mode: bool
                                      ) -> tuple[torch.Tensor, torch.Tensor]:
    w1, w2 = _split(w12, permuted_weights)
    return _experts(hidden_states, expert_routing_table, router_weights, w1, w2, w3,
                    permuted_weights, activation, measure=True)


def mixture_of_experts_fused(hidden_states: torch.Tensor, expert_routing_table: torch.Tensor,
                             router_weights: torch.Tensor, w12: list[torch.Tensor],
                             w3: list[torch.Tensor], permuted_weights: bool, activation: str,
                             experts_min: int, experts_max: int) -> torch.Tensor:
    w1, w2 = _split(w12, permuted_weights)
    return _experts(hidden_states, expert_routing_table, router_weights, w1, w2, w3,
                    permuted_weights, activation)[0]
