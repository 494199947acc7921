"""``Linear`` of the Transformer Engine stand-in: an ``nn.Linear`` whose GEMMs run in fp8
inside ``fp8_autocast(enabled=True)``.

In fp8, the input and the weight are cast to the recipe's forward format (E4M3 for HYBRID)
with per-tensor delayed scales and multiplied by ``torch.ops.hpu.fp8_gemm_v2`` (float32
accumulation); in the backward the output gradient is cast to the backward format (E5M2 for
HYBRID, rounded stochastically for HYBRID unless ``PT_TE_FORCE_SR_BWD=0``) and both gradient
GEMMs run in fp8 the same way. Each cast records the tensor's
amax in the module's history; before each forward (backward) at the recipe's ``interval``
the scales are recomputed from that history (``fp8.compute_scale``), so a step uses scales
from the steps before it. Outside ``fp8_autocast`` the module is a plain linear layer.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from hpu_emulator.kernels.fp8 import limit

from .fp8 import (
    FP8GlobalStateManager,
    compute_amax,
    compute_scale,
    get_fp8_te_dtype,
    get_fp8_te_sr,
)
from .recipe import DelayedScaling

#: Distributed options of Transformer Engine's Linear that a single-device layer honours
#: only at their defaults.
_SINGLE_DEVICE = {"sequence_parallel": False, "tp_group": None, "tp_size": 1,
                  "parallel_mode": None, "fuse_wgrad_accumulation": False,
                  "get_rng_state_tracker": None, "parameters_split": None,
                  "ub_split_rs": False, "ub_split_ag": False}


class ScalingMeta:
    """Scales and amax history of ``count`` tensors; ``history[0]`` is the latest step."""

    def __init__(self, count: int, recipe: DelayedScaling, device: torch.device) -> None:
        self.recipe = recipe
        self.scale = torch.ones(count, dtype=torch.float32, device=device)
        self.amax_history = torch.zeros(recipe.amax_history_len, count, dtype=torch.float32,
                                        device=device)
        self.steps = 0

    def update_scales(self, fp8_max: float) -> None:
        """New scales from the history, written into the same tensors, so that an HPU graph
        captured over a step replays the update and each replay starts from the last one's
        scales. At every step (the default ``interval=1``) the update is device work alone:
        at the first step the history is zeros and the built-in rule keeps each scale whose
        amax is 0, as skipping it would. A longer interval or the recipe's own functions
        are decided here on the host, at the step a graph was captured."""
        recipe = self.recipe
        custom = callable(recipe.amax_compute_algo) or callable(
            recipe.scaling_factor_compute_algo)
        if recipe.interval == 1 and not custom:
            due = True
        else:
            due = self.steps > 0 and self.steps % recipe.interval == 0
        if due:
            amax = compute_amax(self.amax_history, recipe)
            self.scale.copy_(compute_scale(amax, self.scale, fp8_max, recipe))

    def record(self, amaxes: list[torch.Tensor]) -> None:
        latest = torch.stack([a.float().reshape(()) for a in amaxes]).to(self.scale.device)
        self.amax_history.copy_(torch.cat((latest.unsqueeze(0), self.amax_history[:-1])))
        self.steps += 1


def _cast(t: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype, stochastic: bool = False
          ) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.ops.hpu.cast_to_fp8_v2(t, scale, stochastic, True, dtype)


class _Fp8Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                fwd: ScalingMeta, bwd: ScalingMeta, recipe: DelayedScaling) -> torch.Tensor:
        dtype = get_fp8_te_dtype(recipe, fprop_tensor=True)
        fwd.update_scales(min(limit(dtype), recipe.fp8_format.value.max_fwd))
        flat = x.reshape(-1, x.shape[-1])
        x8, x_amax = _cast(flat, fwd.scale[0:1], dtype)
        w8, w_amax = _cast(weight, fwd.scale[1:2], dtype)
        fwd.record([x_amax, w_amax])
        inv_x, inv_w = fwd.scale[0:1].reciprocal(), fwd.scale[1:2].reciprocal()
        out = torch.ops.hpu.fp8_gemm_v2(x8, False, w8, True, None, x.dtype, inv_x, inv_w, bias)
        ctx.save_for_backward(x8, w8, inv_x, inv_w)
        ctx.bwd, ctx.recipe, ctx.shape = bwd, recipe, x.shape
        ctx.dtypes = (x.dtype, weight.dtype, bias is not None)
        return out.reshape(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x8, w8, inv_x, inv_w = ctx.saved_tensors
        x_dtype, w_dtype, has_bias = ctx.dtypes
        dtype = get_fp8_te_dtype(ctx.recipe, fprop_tensor=False)
        ctx.bwd.update_scales(min(limit(dtype), ctx.recipe.fp8_format.value.max_bwd))
        flat = grad.reshape(-1, grad.shape[-1])
        stochastic = get_fp8_te_sr(ctx.recipe, fprop_tensor=False)
        g8, g_amax = _cast(flat, ctx.bwd.scale[0:1], dtype, stochastic)
        ctx.bwd.record([g_amax])
        inv_g = ctx.bwd.scale[0:1].reciprocal()
        grad_x = torch.ops.hpu.fp8_gemm_v2(g8, False, w8, False, None, x_dtype, inv_g, inv_w)
        grad_w = torch.ops.hpu.fp8_gemm_v2(g8, True, x8, False, None, w_dtype, inv_g, inv_x)
        grad_b = flat.sum(0).to(w_dtype) if has_bias else None
        return grad_x.reshape(ctx.shape), grad_w, grad_b, None, None, None


class Linear(torch.nn.Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 params_dtype: torch.dtype | None = None, device: Any = "hpu",
                 init_method: Any = None, return_bias: bool = False,
                 skip_weight_param_allocation: bool = False, minimize_memory: bool = False,
                 **distributed: Any) -> None:
        super().__init__()
        for name, value in distributed.items():
            if name not in _SINGLE_DEVICE:
                raise TypeError(f"Linear() got an unexpected keyword argument {name!r}")
            if value != _SINGLE_DEVICE[name]:
                raise NotImplementedError(
                    f"transformer_engine.Linear({name}={value!r}): the emulator runs "
                    f"single-device layers only; leave {name} at {_SINGLE_DEVICE[name]!r}")
        self.in_features, self.out_features = in_features, out_features
        self.return_bias, self.minimize_memory = return_bias, minimize_memory
        dtype = params_dtype or torch.get_default_dtype()
        self.weight = None
        if not skip_weight_param_allocation:
            self.weight = torch.nn.Parameter(
                torch.empty(out_features, in_features, dtype=dtype, device=device))
        self.bias = (torch.nn.Parameter(torch.empty(out_features, dtype=dtype, device=device))
                     if bias else None)
        self._reset(init_method)
        self.fp8_meta: dict[str, Any] = {}

    def _reset(self, init_method: Any) -> None:
        with torch.no_grad():
            if self.weight is not None:
                if init_method is not None:
                    init_method(self.weight)
                else:
                    torch.nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
            if self.bias is not None:
                self.bias.zero_()

    def _metas(self, recipe: DelayedScaling) -> tuple[ScalingMeta, ScalingMeta]:
        if self.fp8_meta.get("recipe") is not recipe:
            device = self.weight.device
            self.fp8_meta = {"recipe": recipe, "scaling_fwd": ScalingMeta(2, recipe, device),
                             "scaling_bwd": ScalingMeta(1, recipe, device)}
        return self.fp8_meta["scaling_fwd"], self.fp8_meta["scaling_bwd"]

    def forward(self, inp: torch.Tensor, is_first_microbatch: bool | None = None) -> Any:
        if self.weight is None:
            raise RuntimeError("transformer_engine.Linear was built with "
                               "skip_weight_param_allocation=True; assign .weight first")
        bias = None if self.return_bias else self.bias
        if FP8GlobalStateManager.is_fp8_enabled():
            recipe = FP8GlobalStateManager.get_fp8_recipe()
            fwd, bwd = self._metas(recipe)
            out = _Fp8Linear.apply(inp, self.weight, bias, fwd, bwd, recipe)
        else:
            out = torch.nn.functional.linear(inp, self.weight, bias)
        return (out, self.bias) if self.return_bias else out
