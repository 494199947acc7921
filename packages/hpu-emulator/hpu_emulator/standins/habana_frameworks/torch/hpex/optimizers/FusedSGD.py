"""Stand-in for ``habana_frameworks.torch.hpex.optimizers.FusedSGD``.

Same constructor, checks and messages as the bridge's; each step hands a parameter group to
``torch.ops.hpu.optimizer_sgd`` (no momentum) or ``optimizer_sgd_momentum`` (``_hpex_C``'s in
lazy mode), with the learning rate and momentum as device tensors. Momentum buffers start at
zero, as the bridge allocates them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import habana_frameworks.torch.core as htcore
import torch
from habana_frameworks.torch import _hpex_C
from habana_frameworks.torch.utils.internal import is_lazy
from torch.optim import Optimizer
from torch.optim.optimizer import required


class FusedSGD(Optimizer):
    def __init__(self, params: Iterable[Any], lr: float = required, momentum: float = 0,
                 weight_decay: float = 0, dampening: float = 0, nesterov: bool = False) -> None:
        if lr is not required and not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= momentum:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= dampening:
            raise ValueError(f"Invalid dampening value: {dampening}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay,
                        dampening=dampening, nesterov=nesterov)
        super().__init__(params, defaults)
        self.step_t = torch.zeros(1, dtype=torch.int32, device="hpu")
        self.is_lazy = is_lazy()

    def _step_group(self, group: dict[str, Any]) -> None:
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return
        for p in params:
            if p.grad.is_sparse:
                raise RuntimeError(
                    "SGD does not support sparse gradients, please consider SparseSGD")
        grads, weights = [p.grad for p in params], [p.data for p in params]
        lr = torch.tensor([group["lr"]], dtype=torch.float32, device="hpu")
        rest = (group["weight_decay"], group["dampening"], group["nesterov"])
        if group["momentum"] == 0:
            op = _hpex_C.optimizer_sgd if self.is_lazy else torch.ops.hpu.optimizer_sgd
            op(grads, weights, lr, group["weight_decay"], 0.0, group["dampening"],
               group["nesterov"])
            return
        buffers = []
        for p in params:
            state = self.state[p]
            if "momentum_buffer" not in state:  # float32 whatever the weights', as the bridge
                state["momentum_buffer"] = torch.zeros(p.grad.shape, dtype=torch.float32,
                                                       device="hpu")
            buffers.append(state["momentum_buffer"])
        momentum = torch.tensor(float(group["momentum"]), device="hpu")
        op = (_hpex_C.optimizer_sgd_momentum if self.is_lazy
              else torch.ops.hpu.optimizer_sgd_momentum)
        op(grads, weights, buffers, self.step_t, lr, momentum, *rest)

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
