"""``hpu::mixture_of_experts`` (and ``.fused_weights``): a mixture-of-experts MLP block.

Semantics of the bridge's own eager reference (``mixture_of_experts_common`` in
``eager_custom_op_register.cpp``), which optimum-habana's Mixtral, Qwen-MoE and DeepSeek
layers call: for every expert ``e`` (the index into ``w1``/``w2``/``w3``), ``h = act(x @ W1)
* (x @ W2)`` and ``out += (h @ W3) * r[:, e]``, where ``r`` scatters ``router_weights`` to
the experts named by ``expert_routing_table`` (``[tokens, k]``). ``permuted_weights=True``
means the weights are stored ``[out, in]`` as in ``nn.Linear``. ``activation`` is ``gelu``,
``relu`` or ``silu``. ``experts_min``/``experts_max`` name the experts the weight lists
hold, as the hardware kernel reads them (the bridge passes both to it; its eager reference
ignores them): the routing table holds global expert numbers, the lists hold experts
``experts_min..experts_max``, and a token's choice outside them adds nothing. This is how
optimum-habana's DeepSeek-V2 (slices of 80 experts) and its Mixtral with expert parallelism,
and vllm-hpu-extension, call it: the sum of the slices is the whole call. ``fused_weights``
passes ``W1`` and ``W2`` concatenated (on dim 0 when permuted, else dim 1).
``router_weights`` must have ``hidden_states``' dtype and the routing table must be int64,
as the bridge's scatter of the one by the other requires. As there, every product is taken
in ``hidden_states``' dtype (each matmul and product rounded to it, the accumulation of the
experts in it too).

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
             experts_min: int, experts_max: int,
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
    expect(experts_max - experts_min + 1 == experts,
           f"{op}: experts_min..experts_max ({experts_min}..{experts_max}) must name the "
           f"{experts} expert(s) the weight lists hold")
    table = expert_routing_table.to(torch.int64) - experts_min
    held = (table >= 0) & (table < experts)
    act = ACTIVATIONS[activation]
    tokens = hidden_states.shape[0]
    x = hidden_states
    # one column more for the choices of experts this call does not hold: dropped after
    padded = torch.zeros(tokens, experts + 1, dtype=x.dtype, device=x.device).scatter_(
        -1, torch.where(held, table, experts), router_weights)[:, :experts]
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
                    permuted_weights, activation, experts_min, experts_max)[0]


def mixture_of_experts_measured(hidden_states: torch.Tensor, expert_routing_table: torch.Tensor,
                                router_weights: torch.Tensor, w1: list[torch.Tensor],
                                w2: list[torch.Tensor], w3: list[torch.Tensor],
                                permuted_weights: bool, activation: str, experts_min: int,
                                experts_max: int, measurement_mode: bool
                                ) -> tuple[torch.Tensor, torch.Tensor]:
    return _experts(hidden_states, expert_routing_table, router_weights, w1, w2, w3,
                    permuted_weights, activation, experts_min, experts_max, measure=True)


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
                    permuted_weights, activation, experts_min, experts_max, measure=True)


def mixture_of_experts_fused(hidden_states: torch.Tensor, expert_routing_table: torch.Tensor,
                             router_weights: torch.Tensor, w12: list[torch.Tensor],
                             w3: list[torch.Tensor], permuted_weights: bool, activation: str,
                             experts_min: int, experts_max: int) -> torch.Tensor:
    w1, w2 = _split(w12, permuted_weights)
    return _experts(hidden_states, expert_routing_table, router_weights, w1, w2, w3,
                    permuted_weights, activation, experts_min, experts_max)[0]
