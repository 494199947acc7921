"""FP8 recipes of the Transformer Engine stand-in: the formats and delayed scaling.

The API is Transformer Engine's (which Intel's Gaudi port keeps): ``Format`` names the
float8 formats of the forward and the backward pass with their largest values, and
``DelayedScaling`` says how each tensor's scale follows the history of its largest
magnitudes (``amax``). Gaudi's documentation shows ``recipe.DelayedScaling(margin=0,
interval=1)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple

import torch


class _FormatHelper(NamedTuple):
    max_fwd: float
    max_bwd: float


class Format(Enum):
    """E4M3 everywhere, E5M2 everywhere, or HYBRID: E4M3 forward, E5M2 backward.

    The maxima are torch's float8 limits; on Gaudi2 E4M3 saturates at 240, which the casts
    apply (``hpu_plugin.gaudi.generations``).
    """

    E4M3 = _FormatHelper(max_fwd=448.0, max_bwd=448.0)
    E5M2 = _FormatHelper(max_fwd=57344.0, max_bwd=57344.0)
    HYBRID = _FormatHelper(max_fwd=448.0, max_bwd=57344.0)


@dataclass
class DelayedScaling:
    """Scale from the amax history: ``2 ** (floor(log2(fp8_max / amax)) - margin)``,
    recomputed every ``interval`` steps, from the largest (``"max"``) or the latest
    (``"most_recent"``) of the last ``amax_history_len`` amaxes, or by callables."""

    margin: int = 0
    interval: int = 1
    fp8_format: Format = Format.HYBRID
    amax_history_len: int = 1024
    amax_compute_algo: str | Callable[[torch.Tensor], torch.Tensor] = "max"
    scaling_factor_compute_algo: Callable[..., Any] | None = None
    reduce_amax: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.fp8_format, Format):
            raise ValueError(f"fp8_format must be a recipe.Format, got {self.fp8_format!r}")
        if self.amax_history_len < 1:
            raise ValueError(f"amax_history_len must be >= 1, got {self.amax_history_len}")
        if self.interval < 1:
            raise ValueError(f"interval must be >= 1, got {self.interval}")
        if isinstance(self.amax_compute_algo, str) and self.amax_compute_algo not in (
                "max", "most_recent"):
            raise ValueError("amax_compute_algo must be 'max', 'most_recent' or a callable, "
                             f"got {self.amax_compute_algo!r}")
