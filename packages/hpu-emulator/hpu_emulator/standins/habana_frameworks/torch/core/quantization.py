"""Stand-in for ``habana_frameworks.torch.core.quantization``: the inference environment
functions optimum-habana and lightning-habana call (also re-exported by ``core``).

On Gaudi they switch the graph compiler to inference (weights as constants, a matmul layout)
and, in lazy mode, mark the model's parameters as constants; none of that changes results,
so the emulator keeps the switches and does nothing more.
"""

from typing import Any

import torch


def hpu_set_inference_env(model: torch.nn.Module | None = None) -> None:
    """Inference mode for the graph compiler; call before moving the model to ``hpu``."""
    torch.hpu.enable_inference_mode()
    torch.hpu.enable_matmul3d_2d_reshape()


def hpu_inference_initialize(model: torch.nn.Module | None = None,
                             mark_only_scales_as_const: bool = False,
                             optimizer: Any = None, args: Any = None) -> None:
    """The bridge marks the model's parameters as constants (lazy mode) for the graph
    compiler; results do not change, so nothing more is needed here."""


def hpu_teardown_inference_env() -> None:
    torch.hpu.disable_inference_mode()
    torch.hpu.disable_matmul3d_2d_reshape()


#: The older names the bridge keeps ("to be deprecated"), which optimum-habana calls.
hpu_set_env = hpu_set_inference_env
hpu_initialize = hpu_inference_initialize
hpu_reset_env = hpu_teardown_inference_env
