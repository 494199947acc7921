"""Stand-in for ``habana_frameworks.torch.core.step_closure``: the step API's home.

DeepSpeed's HPU fused Adam calls ``step_closure._mark_step_if_lazy()``: a step boundary in
lazy mode, nothing in eager mode (the emulator's only mode).
"""

from habana_frameworks.torch.core import add_step_closure, iter_mark_step, mark_step

__all__ = ["add_step_closure", "iter_mark_step", "mark_step"]


def _mark_step_if_lazy() -> None:
    """Eager mode runs every op at once: there is no step to mark."""
