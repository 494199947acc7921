"""What every check's process shares: the verdict, device acquisition, and faults.

A check module defines a body that returns ``(reason, details)`` on success and raises
:class:`CheckFailed` (or any exception) on failure, or :class:`CannotRun` when this machine
cannot run it; :func:`run` turns that into the verdict line the runner reads.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

from hpu_plugin import settings
from hpu_plugin.selftest import faults, protocol

Body = Callable[[], tuple[str, dict[str, Any]]]
#: Words of the errors seen when a Gaudi module cannot be acquired because another process
#: holds it: the driver refuses a second open ("Can't open ... because another user is
#: working on it", EBUSY) and the Gaudi software reports the acquisition as failed.
BUSY_WORDS = ("acquire", "busy", "another user")


class CannotRun(Exception):
    """This machine cannot run the check; the message says why (not a failure)."""

    def __init__(self, reason: str, **details: Any) -> None:
        super().__init__(reason)
        self.details = details


class ModuleBusy(CannotRun):
    """The module chosen for this process is held by another process."""


class CheckFailed(AssertionError):
    """What the check verifies is wrong; the message says what was expected and seen."""


def require(condition: object, message: str) -> None:
    """Fail the check with ``message`` unless ``condition`` holds (kept under ``python -O``)."""
    if not condition:
        raise CheckFailed(message)


def chosen_module() -> str:
    """The module this process acquires: ``HABANA_VISIBLE_MODULES[LOCAL_RANK]`` as the runner
    sets it, or ``?`` when the runner could not choose (no ``hl-smi``)."""
    modules = [m.strip() for m in os.environ.get("HABANA_VISIBLE_MODULES", "").split(",")]
    raw = os.environ.get("LOCAL_RANK", "")
    rank = settings.rank("LOCAL_RANK", raw) if raw.strip() else 0
    return modules[rank] if rank < len(modules) and modules[rank] else "?"


def acquire() -> Any:
    """Import torch and acquire this process's Gaudi module; returns ``torch``.

    A module another process holds cannot be taken from it (the driver refuses the open), so
    trying is safe; that refusal becomes :class:`ModuleBusy`, which the runner answers by
    trying another module. Any other error here is a failure of the check.
    """
    import torch

    module = chosen_module()
    if not (hasattr(torch, "hpu") and torch.hpu.is_available()):
        raise CheckFailed("torch.hpu is not available in this process (is the plugin active?)")
    try:
        if module in faults.busy_modules():
            raise RuntimeError(f"Device acquire failed: module {module} is busy (injected)")
        torch.hpu.init() if hasattr(torch.hpu, "init") else None
        (torch.ones(1, device="hpu") + 1).cpu()
    except Exception as exc:
        text = str(exc)
        if any(word in text.lower() for word in BUSY_WORDS):
            raise ModuleBusy(
                f"module {module} is held by another process: {text.splitlines()[0][:200]}",
                busy_module=module,
            ) from exc
        raise CheckFailed(f"acquiring Gaudi module {module} failed: {text[:300]}") from exc
    return torch


def run(name: str, body: Body) -> None:
    """Run ``body`` as check ``name`` and print its verdict; exit 1 on a failure."""
    try:
        faults.apply(name)
        reason, details = body()
    except CannotRun as exc:
        protocol.emit(protocol.CANNOT_RUN, str(exc), exc.details)
        return
    except Exception as exc:
        traceback.print_exc()
        message = str(exc) if isinstance(exc, AssertionError) else f"{type(exc).__name__}: {exc}"
        protocol.emit(protocol.FAIL, message.strip().splitlines()[0][:300] if message else name)
        sys.exit(1)
    protocol.emit(protocol.PASS, reason, details)
