"""Stand-in for ``habana_frameworks.torch.hpex.normalization.FusedClipNorm``.

``FusedClipNorm(parameters, max_norm).clip_norm(parameters)`` clips the gradients to a total
2-norm of ``max_norm`` in place and returns the total norm before clipping, as
``torch.nn.utils.clip_grad_norm_`` does; with no gradient it returns ``tensor(0.)``. It runs
``torch.ops.hpu.fused_clip_norm`` (eager) or ``_hpex_C.fused_norm`` (lazy), as the bridge.
"""

from __future__ import annotations

from collections.abc import Iterable

import habana_frameworks.torch.core as htcore
import torch
from habana_frameworks.torch import _hpex_C
from habana_frameworks.torch.utils.internal import is_lazy


class FusedClipNorm:
    def __init__(self, parameters: Iterable[torch.nn.Parameter], max_norm: float) -> None:
        params = list(parameters)
        # The bridge assumes one dtype for all parameters and takes the first one's.
        self.dtype = params[0].dtype if params else torch.float32
        self.max_norm_t = torch.full((1,), float(max_norm), dtype=self.dtype, device="hpu")
        self.norm_type = 2.0

    def clip_norm(self, parameters: torch.Tensor | Iterable[torch.Tensor]) -> torch.Tensor:
        htcore.step_closure._mark_step_if_lazy()
        tensors = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        grads = [p.grad for p in tensors if p.grad is not None]
        if not grads:
            return torch.tensor(0.0)
        with torch.no_grad():
            if is_lazy():
                total = _hpex_C.fused_norm(grads, self.max_norm_t, self.norm_type)
            else:
                grads.append(torch.zeros(1, dtype=self.dtype, device="hpu"))
                total = torch.ops.hpu.fused_clip_norm(grads, self.max_norm_t, self.norm_type)
        htcore.step_closure._mark_step_if_lazy()
        return total
