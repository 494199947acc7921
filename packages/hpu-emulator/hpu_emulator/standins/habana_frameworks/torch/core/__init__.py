"""Stand-in for ``habana_frameworks.torch.core``: ``torch.hpu``, the step API and the
environment functions of the real module (``core.quantization``, re-exported here as there).

As in the real module, ``core.hpu`` is ``habana_frameworks.torch.hpu`` (DeepSpeed's HPU
accelerator reaches ``htcore.hpu.Event``) and ``core.step_closure`` holds the step functions.

In lazy mode (``PT_HPU_LAZY_MODE=1``) ``mark_step`` is where the accumulated graph runs: the
emulator counts its compilation or recipe-cache hit there and runs the step closures
(``hpu_emulator.lazy``). In eager mode the step functions do nothing, as on
hardware, where they log a warning once.
"""

import logging
from collections.abc import Callable
from typing import Any

from hpu_emulator import lazy
from hpu_plugin.reporting import say_once

log = logging.getLogger("habana_frameworks")


def _warn_once(name: str) -> None:
    """One warning for all step functions, as the real stack gives."""
    say_once("habana_frameworks:eager-step", logging.WARNING,
             "%s has no effect in eager mode (PT_HPU_LAZY_MODE=0)", name, logger=log)


def mark_step(device_str: str = "", sync: bool = False) -> None:
    if lazy.is_lazy():
        lazy.mark_step()
    else:
        _warn_once("mark_step")


def iter_mark_step(device_str: str = "") -> None:
    """A step boundary, as ``mark_step``; the bridge's form takes no iterable."""
    mark_step(device_str)


def add_step_closure(closure: Callable[..., Any], args: tuple = ()) -> None:
    """Lazy mode: run ``closure(*args)`` at the next ``mark_step``, as the bridge does.
    Eager mode: nothing, as on the bridge (its lazy-only functions do nothing there), so a
    closure that only runs under emulation is not mistaken for one that runs on Gaudi."""
    if lazy.is_lazy():
        lazy.add_step_closure(closure, args)
        return
    _warn_once("add_step_closure")


def is_initialized() -> bool:
    return True


from habana_frameworks.torch import hpu  # noqa: E402, F401  (the real module exposes it)
from habana_frameworks.torch.core import quantization, step_closure  # noqa: E402, F401
from habana_frameworks.torch.core.quantization import (  # noqa: E402, F401
    hpu_inference_initialize,
    hpu_initialize,
    hpu_reset_env,
    hpu_set_env,
    hpu_set_inference_env,
    hpu_teardown_inference_env,
)
from habana_frameworks.torch.utils.internal import is_lazy  # noqa: E402, F401
