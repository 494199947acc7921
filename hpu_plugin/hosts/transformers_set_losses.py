"""Transformers: the set-prediction losses in float32 under Gaudi's autocast.

DETR's, Mask2Former's and the other detection and segmentation losses pair predictions with
targets on the host (SciPy's ``linear_sum_assignment`` of a cost matrix copied to the CPU),
then sample and compare what was paired. Under CUDA's autocast they run in float32:
``softmax`` and the loss functions are on its float32 list, and the rest follows by type
promotion. Gaudi's autocast runs ``softmax`` and ``mul`` in bf16 (the bridge's default
lower-precision list), so the cost matrix comes out bf16 and NumPy refuses it ("Got
unsupported ScalarType BFloat16"), and Mask2Former's point sampling gives ``grid_sample`` a
bf16 grid for float32 masks: the first bf16 training step fails. Here, under Gaudi's
autocast, each such loss module and its matcher run with autocast off and their bf16 and
float16 inputs in float32 (the gradient flows back through the cast): the loss a CUDA user
gets, where the step failed.
"""

from __future__ import annotations

import copy
import functools
import types
from collections.abc import Callable
from typing import Any

from hpu_plugin import importhook
from hpu_plugin.patching import Patches, is_ours, ours

DEVICE_TYPE = "hpu"
#: The modules that define a ``*HungarianMatcher`` and the loss module that calls it
#: (Transformers 4.51 to 5.24); a module a release does not have is never imported, and its
#: hook never runs.
MODULES = (
    "transformers.loss.loss_d_fine",
    "transformers.loss.loss_deimv2",
    "transformers.loss.loss_for_object_detection",
    "transformers.loss.loss_deformable_detr",
    "transformers.loss.loss_grounding_dino",
    "transformers.loss.loss_lw_detr",
    "transformers.loss.loss_rf_detr",
    "transformers.loss.loss_rt_detr",
    "transformers.models.eomt.modeling_eomt",
    "transformers.models.eomt_dinov3.modeling_eomt_dinov3",
    "transformers.models.mask2former.modeling_mask2former",
    "transformers.models.maskformer.modeling_maskformer",
    "transformers.models.oneformer.modeling_oneformer",
    "transformers.models.videomt.modeling_videomt",
)


def _float32(value: Any) -> Any:
    """``value`` with its bf16 and float16 tensors in float32, inside lists, tuples and
    dicts too, each container of its own type (a ``ModelOutput`` stays one)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.float() if value.dtype in (torch.bfloat16, torch.float16) else value
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return type(value)(*(_float32(item) for item in value))
    if isinstance(value, list | tuple):
        return type(value)(_float32(item) for item in value)
    if isinstance(value, dict):
        converted = copy.copy(value)
        for key, item in value.items():
            converted[key] = _float32(item)
        return converted
    return value


def in_float32(forward: Callable[..., Any]) -> Callable[..., Any]:
    """``forward`` run in float32 while Gaudi's autocast is on; as it is otherwise."""
    import torch

    @functools.wraps(forward)
    def float32_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not torch.is_autocast_enabled(DEVICE_TYPE):
            return forward(self, *args, **kwargs)
        with torch.autocast(DEVICE_TYPE, enabled=False):
            return forward(self, *_float32(args), **_float32(kwargs))

    return ours(float32_forward)


def install_losses(patches: Patches, module: types.ModuleType) -> None:
    """Wrap the ``forward`` of each ``*HungarianMatcher`` and ``*Loss`` class ``module``
    defines."""
    for name, cls in list(vars(module).items()):
        if (name.endswith(("HungarianMatcher", "Loss")) and isinstance(cls, type)
                and cls.__module__ == module.__name__ and "forward" in vars(cls)
                and not is_ours(vars(cls)["forward"])):
            patches.set(cls, "forward", in_float32(vars(cls)["forward"]))


def install(patches: Patches) -> None:
    for name in MODULES:
        importhook.when_imported(name, functools.partial(install_losses, patches))
