"""FP8 state of the Transformer Engine stand-in: availability, ``fp8_autocast`` and the
delayed-scaling update.

Backward casts of HYBRID recipes round stochastically (``get_fp8_te_sr``). Availability is
the Gaudi port's rule: not on first-generation Gaudi, with its message
("FP8 not supported on Gaudi, Gaudi2 or higher required"), which ``fp8_autocast(enabled=
True)`` raises as an ``AssertionError`` on entry, as the port does. The scaling update is
Transformer Engine's default: amax from the history (its maximum, or the most recent
entry), scale ``2 ** (floor(log2(fp8_max / amax)) - margin)``, kept when amax is 0.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from .recipe import DelayedScaling, Format

FP8_NOT_ON_GAUDI = "FP8 not supported on Gaudi, Gaudi2 or higher required"


def check_fp8_support() -> tuple[bool, str]:
    from habana_frameworks.torch.hpu import get_device_name

    if get_device_name() == "GAUDI":
        return False, FP8_NOT_ON_GAUDI
    return True, ""


def is_fp8_available() -> tuple[bool, str]:
    return check_fp8_support()


class FP8GlobalStateManager:
    """Whether fp8 is on, with which recipe and group, and how deep the autocasts nest."""

    FP8_ENABLED = False
    FP8_RECIPE: DelayedScaling | None = None
    FP8_DISTRIBUTED_GROUP: Any = None
    FP8_AUTOCAST_DEPTH = 0

    @classmethod
    def is_fp8_available(cls) -> tuple[bool, str]:
        return check_fp8_support()

    @classmethod
    def is_fp8_enabled(cls) -> bool:
        return cls.FP8_ENABLED

    @classmethod
    def get_fp8_recipe(cls) -> DelayedScaling:
        return cls.FP8_RECIPE if cls.FP8_RECIPE is not None else DelayedScaling()

    @classmethod
    def get_fp8_group(cls) -> Any:
        return cls.FP8_DISTRIBUTED_GROUP


def get_fp8_te_dtype(fp8_recipe: DelayedScaling, fprop_tensor: bool = True) -> torch.dtype:
    """E4M3 for E4M3 recipes and HYBRID's forward tensors, E5M2 otherwise."""
    if fp8_recipe.fp8_format == Format.E4M3 or (
            fp8_recipe.fp8_format == Format.HYBRID and fprop_tensor):
        return torch.float8_e4m3fn
    return torch.float8_e5m2


@contextmanager
def fp8_autocast(enabled: bool = False, force_measurement: bool | None = None,
                 fp8_recipe: DelayedScaling | None = None, fp8_group: Any = None
                 ) -> Iterator[None]:
    """Inside, Transformer Engine modules compute their GEMMs in fp8 (when ``enabled``)."""
    state = (FP8GlobalStateManager.FP8_ENABLED, FP8GlobalStateManager.FP8_RECIPE,
             FP8GlobalStateManager.FP8_DISTRIBUTED_GROUP)
    try:
        FP8GlobalStateManager.FP8_ENABLED = enabled
        FP8GlobalStateManager.FP8_RECIPE = fp8_recipe or DelayedScaling()
        FP8GlobalStateManager.FP8_DISTRIBUTED_GROUP = fp8_group
        FP8GlobalStateManager.FP8_AUTOCAST_DEPTH += 1
        if enabled:
            available, reason = check_fp8_support()
            assert available, reason
        yield
    finally:
        (FP8GlobalStateManager.FP8_ENABLED, FP8GlobalStateManager.FP8_RECIPE,
         FP8GlobalStateManager.FP8_DISTRIBUTED_GROUP) = state
        FP8GlobalStateManager.FP8_AUTOCAST_DEPTH -= 1


def get_fp8_te_sr(fp8_recipe: DelayedScaling, fprop_tensor: bool = True) -> bool:
    """Stochastic rounding of a cast: never forward; backward when ``PT_TE_FORCE_SR_BWD``
    says so (``true``/``1``), else for HYBRID recipes, as the Gaudi port decides."""
    if fprop_tensor:
        return False
    forced = os.getenv("PT_TE_FORCE_SR_BWD")
    if forced is not None:
        return forced.lower() in ("true", "1")
    return fp8_recipe.fp8_format == Format.HYBRID


def compute_amax(amax_history: torch.Tensor, recipe: DelayedScaling) -> torch.Tensor:
    if callable(recipe.amax_compute_algo):
        return recipe.amax_compute_algo(amax_history)
    if recipe.amax_compute_algo == "max":
        return amax_history.amax(dim=0)
    return amax_history[0]


def compute_scale(amax: torch.Tensor, scale: torch.Tensor, fp8_max: float,
                  recipe: DelayedScaling) -> torch.Tensor:
    if recipe.scaling_factor_compute_algo is not None:
        return recipe.scaling_factor_compute_algo(amax, scale, fp8_max, recipe)
    exponent = torch.floor(torch.log2(fp8_max / amax)) - recipe.margin
    return torch.where(amax > 0.0, torch.pow(2.0, exponent), scale)
