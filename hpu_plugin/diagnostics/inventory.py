"""What is here: installed versions, whether there is a Gaudi to look at, and ``torch.hpu``.

torch is imported only when Gaudi software is installed or emulation is requested
(importing it is what activates the plugin and, on the emulator, puts its ``hl-smi`` on
``PATH``), so ``--help`` and a machine without Gaudi stay fast.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib import metadata
from typing import Any

from hpu_plugin import hookspecs, settings, state
from hpu_plugin.gaudi.software import GAUDI_DISTRIBUTION, real_gaudi_installed

#: Every hook, in the order the contract declares them (hookspecs is their one home).
HOOKS: tuple[str, ...] = tuple(
    name
    for name, spec in vars(hookspecs).items()
    if inspect.isfunction(spec) and getattr(spec, hookspecs.PROJECT + "_spec", None) is not None
)


def version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def emulation_requested() -> bool:
    return settings.emulation_requested(os.environ)


def gaudi_software() -> bool:
    """Real Gaudi software (the emulator's stand-ins do not count)."""
    return real_gaudi_installed()


def gaudi_expected() -> bool:
    """Whether there is anything to look at: real Gaudi software, or emulation asked for."""
    return gaudi_software() or emulation_requested()


def no_gaudi_reason() -> str:
    return (
        f"No Gaudi here: the Gaudi software ({GAUDI_DISTRIBUTION}, imported as "
        "habana_frameworks) is not installed and HPU_PLUGIN_EMULATE is not set, so the plugin "
        "stays off. Install the Gaudi software on a Gaudi host, or set HPU_PLUGIN_EMULATE=1 "
        "to emulate one."
    )


def import_torch() -> dict[str, str]:
    """Import torch (which runs the plugin's activation) when there is Gaudi to look at;
    returns what activation did."""
    if gaudi_expected() and "torch" not in sys.modules:
        with _reported_once(lambda: state.get("reason", "")):
            try:
                import torch  # noqa: F401  runs hpu_plugin.autoload
            except Exception as exc:  # report, do not crash the diagnostic
                return {"status": "failed", "reason": f"import torch failed: {exc!r}"}
    return dict(state)


@contextlib.contextmanager
def _reported_once(reason: Callable[[], str]) -> Iterator[None]:
    """Hold back the plugin's log lines while torch is imported, then pass on those that
    the report will not show anyway: activation's failure reason is printed by the
    command, and printing it twice (stderr and stdout) reads as two problems."""
    logger = logging.getLogger("hpu_plugin")
    held: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = held.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    propagate, logger.propagate = logger.propagate, False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
        shown = reason()
        for record in held:
            if not shown or shown not in record.getMessage():
                logger.handle(record)


def hpu_module() -> Any:
    torch = sys.modules.get("torch")
    return getattr(torch, "hpu", None) if torch is not None else None


def device_available() -> bool:
    hpu = hpu_module()
    try:
        return bool(hpu is not None and hpu.is_available())
    except Exception:
        return False


def device_name() -> str:
    """``torch.hpu.get_device_name()`` when a device is ready, else ``""``."""
    if not device_available():
        return ""
    try:
        return str(hpu_module().get_device_name())
    except Exception:
        return ""


def environ_with_defaults() -> dict[str, str]:
    """The environment the Gaudi software will see: the plugin's defaults fill what the user
    left unset (they already have, if activation ran in this process)."""
    from hpu_plugin.gaudi.environment import apply_defaults

    environ = dict(os.environ)
    apply_defaults(environ)
    return environ


def mode_text(environ: Mapping[str, str]) -> str:
    """Lazy or eager, and where that comes from; "none" without Gaudi (no default was applied).

    ``environ`` is the environment with the plugin's defaults filled in. When activation
    ended without setting anything (it failed, or ``HPU_PLUGIN_DISABLE`` skipped it), those
    defaults were never applied: the mode is then read from the real environment, and an
    unset ``PT_HPU_LAZY_MODE`` is the Gaudi software's own default (lazy), not ours.
    """
    if not gaudi_expected():
        return "none (no Gaudi software, no emulation requested)"
    from hpu_plugin import state
    from hpu_plugin.gaudi.config_error import GaudiConfigError
    from hpu_plugin.gaudi.environment import LAZY_MODE
    from hpu_plugin.gaudi.modes import mode
    from hpu_plugin.patching import environ_entry, this_process

    set_here = environ_entry(LAZY_MODE) in this_process.environment.made
    ended_unset = state["status"] in ("failed", "skipped") and not set_here
    if ended_unset:
        environ = os.environ
    try:
        name = mode(environ).name
    except GaudiConfigError as exc:
        return f"invalid: {exc}"
    if LAZY_MODE in os.environ and not set_here:
        by = "set by the user"
    elif ended_unset:
        return (f"{name} ({LAZY_MODE} unset: the Gaudi software's default; hpu-plugin set "
                f"nothing, activation {state['status']})")
    else:
        by = "set by hpu-plugin"
    return f"{name} ({LAZY_MODE}={environ.get(LAZY_MODE)}, {by})"


def query_hlsmi(fields: Sequence[str]) -> Any:
    """``machine.query``; a bad ``HPU_PLUGIN_HLSMI_TIMEOUT`` becomes the answer's reason (a
    report, not a traceback; doctor also lists it as a finding with its fix)."""
    from hpu_plugin import machine
    from hpu_plugin.gaudi.config_error import GaudiConfigError

    try:
        return machine.query(fields)
    except GaudiConfigError as exc:
        return machine.HlSmiQuery(None, reason=str(exc))
