"""``FusedEMA``: an exponential moving average of a model's state, updated by one fused op.

As the bridge's class: a copy of the model (in eval mode) holds the average; each
``update(model)`` counts an update and moves every tensor of the copy's state towards the
model's with the decay ``decay * (1 - exp(-updates / 2000))`` (a ramp for the first
updates), through ``torch.ops.hpu.optimizer_ema`` (``_hpex_C.fused_ema`` in lazy mode, with a
step marked before and after).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable

import torch
from habana_frameworks.torch.core import step_closure
from habana_frameworks.torch.utils.internal import is_lazy
from torch import nn

_PARALLEL = (nn.parallel.DataParallel, nn.parallel.DistributedDataParallel)


class FusedEMA:
    def __init__(self, model: nn.Module, decay: float = 0.9999, updates: float = 0) -> None:
        if not decay >= 0.0:
            raise ValueError(f"Invalid decay value: {decay}")
        inner = model.module if isinstance(model, _PARALLEL) else model
        self.ema = copy.deepcopy(inner).eval()
        self.decay = lambda count: decay * (1 - math.exp(-count / 2000))
        self.updates = updates
        self.updated_ema = list(self.ema.state_dict().values())
        if is_lazy():
            from habana_frameworks.torch import _hpex_C

            self.op = _hpex_C.fused_ema
        else:
            self.op = torch.ops.hpu.optimizer_ema

    def update(self, model: nn.Module) -> None:
        step_closure._mark_step_if_lazy()
        model_inputs = list(model.state_dict().values())
        with torch.no_grad():
            self.updates += 1
            decay = torch.tensor([self.decay(self.updates)]).to("hpu")
        self.op(model_inputs, self.updated_ema, decay)
        step_closure._mark_step_if_lazy()

    def update_attr(self, model: nn.Module, include: Iterable[str] = (),
                    exclude: Iterable[str] = ("process_group", "reducer")) -> None:
        """Copy the model's public attributes (those in ``include`` if given) to the copy."""
        include, exclude = tuple(include), tuple(exclude)
        for name, value in model.__dict__.items():
            if (include and name not in include) or name.startswith("_") or name in exclude:
                continue
            setattr(self.ema, name, value)
