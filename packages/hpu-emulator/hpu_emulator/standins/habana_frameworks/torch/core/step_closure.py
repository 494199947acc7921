"""Stand-in for ``habana_frameworks.torch.core.step_closure``: the step API's home.

DeepSpeed's HPU fused Adam calls ``step_closure._mark_step_if_lazy()``: a step boundary in
lazy mode, nothing in eager mode.
"""

from habana_frameworks.torch.core import add_step_closure, iter_mark_step, mark_step

from hpu_emulator import lazy

__all__ = ["add_step_closure", "iter_mark_step", "mark_step"]


def _mark_step_if_lazy(device_str: str = "") -> None:
    if lazy.is_lazy():
        mark_step(device_str)
