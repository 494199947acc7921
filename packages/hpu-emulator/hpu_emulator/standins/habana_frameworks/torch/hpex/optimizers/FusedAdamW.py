"""Stand-in for ``habana_frameworks.torch.hpex.optimizers.FusedAdamW``.

Same constructor, checks and messages as the bridge's (``eps`` defaults to 1e-6 there,
``bias_correction`` and ``moments_dtype`` are its own): each step hands a whole parameter
group to one ``torch.ops.hpu.optimizer_adamw`` call with ``neg_step = -lr * sqrt(1 -
beta2^t) / (1 - beta1^t)`` and the weight-decay factor ``1 - lr * weight_decay``, in the
mode's call form (a tensor factor and a flag in eager mode, a float in lazy mode). The step
count is kept per group (``group["step"]``) as the bridge keeps it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from habana_frameworks.torch import core as htcore
from habana_frameworks.torch.utils.internal import is_lazy
from torch.optim import Optimizer

FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
MomentsDtype = torch.dtype | tuple[torch.dtype, torch.dtype] | None


class FusedAdamW(Optimizer):
    def __init__(self, params: Iterable[Any], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0, bias_correction: bool = True,
                 moments_dtype: MomentsDtype = None) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr} - should be >= 0.0")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter: {betas[0]} - should be in [0.0, 1.0[")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter: {betas[1]} - should be in [0.0, 1.0[")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps} - should be >= 0.0")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        bias_correction=bias_correction)
        super().__init__(params, defaults)
        self.is_lazy = is_lazy()
        self.moments_dtype = moments_dtype
        dtypes = moments_dtype if isinstance(moments_dtype, tuple) else (moments_dtype,)
        self.moments_in_fp8 = any(d in FP8 for d in dtypes)

    def _moment_dtypes(self, param_dtype: torch.dtype) -> tuple[torch.dtype, torch.dtype]:
        if self.moments_dtype is None:
            return param_dtype, param_dtype
        if isinstance(self.moments_dtype, tuple):
            return self.moments_dtype
        return self.moments_dtype, self.moments_dtype

    def _state(self, p: torch.Tensor) -> dict[str, Any]:
        state = self.state[p]
        if not state:
            avg_dtype, sq_dtype = self._moment_dtypes(p.dtype)
            state["step"] = 0
            state["exp_avg"] = torch.zeros(p.shape, dtype=avg_dtype, device=p.device)
            state["exp_avg_sq"] = torch.zeros(p.shape, dtype=sq_dtype, device=p.device)
            if self.moments_in_fp8:
                state["exp_avg_scale"] = torch.ones(1, dtype=p.dtype, device=p.device)
                state["exp_avg_sq_scale"] = torch.ones(1, dtype=p.dtype, device=p.device)
        return state

    @staticmethod
    def _bias_correction(group: dict[str, Any]) -> bool:
        # Old checkpoints say "correct_bias"; torch.optim.AdamW's groups say neither.
        return bool(group.get("bias_correction", group.get("correct_bias", True)))

    def _step_group(self, group: dict[str, Any]) -> None:
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return
        for p in params:
            if p.grad.is_sparse:
                raise RuntimeError(
                    "Adam does not support sparse gradients, please consider SparseAdam")
        states = [self._state(p) for p in params]
        beta1, beta2 = group["betas"]
        group["step"] = group.get("step", 0) + 1
        step_size = group["lr"]
        if self._bias_correction(group):
            step_size *= math.sqrt(1.0 - beta2 ** group["step"]) / (1.0 - beta1 ** group["step"])
        first = params[0]
        neg_step = torch.tensor([-step_size], dtype=first.dtype, device=first.device)
        decay = 1.0 - group["weight_decay"] * group["lr"]
        scales: tuple[Any, Any] = (None, None)
        if self.moments_in_fp8:
            scales = ([s["exp_avg_scale"] for s in states],
                      [s["exp_avg_sq_scale"] for s in states])
        lists = ([p.grad for p in params], [p.data for p in params],
                 [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states])
        if self.is_lazy:
            torch.ops.hpu.optimizer_adamw(*lists, neg_step, beta1, beta2, group["eps"], decay,
                                          *scales)
        else:
            decay_t = torch.tensor([decay], dtype=first.dtype, device=first.device)
            torch.ops.hpu.optimizer_adamw(*lists, neg_step, beta1, beta2, group["eps"], decay_t,
                                          decay != 1.0, *scales)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            htcore.step_closure._mark_step_if_lazy()
            self._step_group(group)
        htcore.step_closure._mark_step_if_lazy()
        return loss
