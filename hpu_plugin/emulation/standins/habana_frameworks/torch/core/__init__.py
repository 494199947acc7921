"""Stand-in for ``habana_frameworks.torch.core``: ``torch.hpu`` and the lazy-mode step API.

As in the real module, ``core.hpu`` is ``habana_frameworks.torch.hpu`` (DeepSpeed's HPU
accelerator reaches ``htcore.hpu.Event``) and ``core.step_closure`` holds the step functions.

In eager mode (the emulator's only mode) the step functions do nothing, as on hardware,
where they log a warning once.
"""

import logging
from collections.abc import Callable
from typing import Any

from hpu_plugin.reporting import say_once

log = logging.getLogger("habana_frameworks")


def _warn_once(name: str) -> None:
    """One warning for all step functions, as the real stack gives."""
    say_once("habana_frameworks:eager-step", logging.WARNING,
             "%s has no effect in eager mode (PT_HPU_LAZY_MODE=0)", name, logger=log)


def mark_step(device_str: str = "", sync: bool = False) -> None:
    _warn_once("mark_step")


def iter_mark_step(iterable: Any) -> Any:
    _warn_once("iter_mark_step")
    yield from iterable


def add_step_closure(
    closure: Callable[..., Any], args: tuple = (), run_async: bool = False
) -> None:
    _warn_once("add_step_closure")
    closure(*args)


def is_initialized() -> bool:
    return True


from habana_frameworks.torch import hpu  # noqa: E402, F401  (the real module exposes it)
from habana_frameworks.torch.core import step_closure  # noqa: E402, F401
