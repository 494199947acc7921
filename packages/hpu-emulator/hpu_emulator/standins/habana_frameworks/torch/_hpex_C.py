"""Stand-in for ``habana_frameworks.torch._hpex_C``: the lazy-mode entry points that
``hpex.normalization.FusedClipNorm``, ``hpex.optimizers.FusedSGD`` and
``hpex.movingavrg.FusedEMA`` call when
``is_lazy()``. Each runs the same emulated kernel as the eager op."""

from __future__ import annotations

import torch

from hpu_emulator.kernels import normalization, optimizers


def fused_norm(grad: list[torch.Tensor], max_norm: torch.Tensor, norm_type: float
               ) -> torch.Tensor:
    total = torch.zeros(1, dtype=max_norm.dtype, device=max_norm.device)
    return normalization.fused_clip_norm([*grad, total], max_norm, norm_type)


optimizer_sgd = optimizers.optimizer_sgd
optimizer_sgd_momentum = optimizers.optimizer_sgd_momentum
fused_ema = optimizers.optimizer_ema
