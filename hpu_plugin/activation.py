"""What runs inside ``import torch`` when there may be Gaudi to serve.

The ``torch.backends`` entry point is ``hpu_plugin.autoload`` (the package root): it answers
the common case (no Gaudi software, no switch set) without loading this module, so
``import torch`` on a machine without Gaudi loads ``hpu_plugin`` only
(``tests/activation/test_import_footprint.py`` checks it). Everything else comes here.
PyTorch turns any exception raised inside the entry point into a failed ``import torch``
for every program on the machine, so :func:`autoload` never raises: a fault is logged once
and the plugin stays off. ``hpu_plugin.pth`` calls :func:`add_standins` at interpreter
start when emulation is requested.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys

from hpu_plugin import NO_GAUDI, state  # the package root: already loaded

log = logging.getLogger("hpu_plugin")

#: PyTorch's own switch for backend autoload: any value but "1" turns it off, and then
#: nothing runs :func:`autoload`, so nothing would start the emulator.
TORCH_AUTOLOAD = "TORCH_DEVICE_BACKEND_AUTOLOAD"

def add_standins() -> None:
    """Run by ``hpu_plugin.pth`` at interpreter start when emulation is requested.

    Hosts look for ``habana_frameworks`` before they import torch; the stand-ins must be
    findable from the start, as the real package is. Not added when PyTorch's backend
    autoload is off: nothing would then start the emulator, and hosts that find the
    stand-ins would take Gaudi branches into a device that is not there. Never raises: a
    ``.pth`` error would print on every interpreter start.
    """
    try:
        from hpu_plugin import settings
        from hpu_plugin.gaudi.software import STANDINS, real_gaudi_installed

        if not settings.emulation_requested() or settings.is_on(
                os.environ.get("HPU_PLUGIN_DISABLE")):
            return
        if os.environ.get(TORCH_AUTOLOAD, "1") != "1":
            from hpu_plugin.reporting import say_once

            say_once(  # once: site may read a venv's .pth files twice
                TORCH_AUTOLOAD, logging.WARNING,
                "hpu_plugin: HPU_PLUGIN_EMULATE is set but %s=%r turns off PyTorch's backend "
                "autoload, so the Gaudi emulator does not start; unset %s (or set it to 1) "
                "to emulate, or unset HPU_PLUGIN_EMULATE.",
                TORCH_AUTOLOAD, os.environ[TORCH_AUTOLOAD], TORCH_AUTOLOAD,
            )
            return
        if STANDINS not in sys.path and not real_gaudi_installed():
            sys.path.append(STANDINS)
    except Exception as exc:
        log.error("hpu_plugin: could not add the emulator's stand-ins to sys.path: %r", exc)


def autoload() -> None:
    """The full activation, from ``hpu_plugin.autoload``; idempotent; never raises."""
    if state["status"] != "off":
        return
    unset = {name for name in _DEFAULTED if name not in os.environ}
    try:
        _activate()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # never break `import torch`; SystemExit included
        state.update(status="failed", reason=f"{type(exc).__name__}: {exc}")
        log.error("hpu_plugin: activation failed, the plugin is off: %s", state["reason"])
    if state["status"] == "failed":
        _undo_defaults(unset)
    if state.get("emulator") != "started":
        _withdraw_standins()


#: The Gaudi defaults activation exports (see ``gaudi.environment.DEFAULTS``).
_DEFAULTED = ("PT_ENABLE_INT64_SUPPORT", "PT_HPU_LAZY_MODE")


def _undo_defaults(unset: set[str]) -> None:
    """A plugin that ends off must leave the environment as it found it: the defaults it
    exported would otherwise reach child processes as if the user had set them."""
    for name in unset:
        os.environ.pop(name, None)
    try:
        from hpu_plugin.gaudi.environment import APPLIED

        for name in unset:
            APPLIED.pop(name, None)
    except Exception:  # gaudi/ not importable: nothing was applied through it
        pass


def _withdraw_standins() -> None:
    """Without a running emulator its stand-ins must not be found: hosts that find
    ``habana_frameworks`` import it and take their Gaudi branches."""
    try:
        from hpu_plugin.gaudi.software import STANDINS

        if STANDINS not in sys.path:
            return
        sys.path.remove(STANDINS)
        importlib.invalidate_caches()
        for name, module in list(sys.modules.items()):
            if (getattr(module, "__file__", None) or "").startswith(STANDINS):
                del sys.modules[name]
    except Exception as exc:
        log.error("hpu_plugin: could not withdraw the emulator's stand-ins: %r", exc)


def _activate() -> None:
    from hpu_plugin import settings
    from hpu_plugin.gaudi.software import real_gaudi_installed

    environ = os.environ
    if settings.is_on(environ.get("HPU_PLUGIN_DISABLE")):
        state.update(status="skipped", reason="HPU_PLUGIN_DISABLE is set")
        return
    emulate = settings.emulation_requested(environ)
    real = real_gaudi_installed()
    if not emulate and not real:
        state.update(status="skipped", reason=NO_GAUDI)
        return
    if emulate and real:
        log.error(
            "hpu_plugin: HPU_PLUGIN_EMULATE=%s is ignored because the real Gaudi software "
            "(habana_frameworks) is installed; unset HPU_PLUGIN_EMULATE to silence this, or "
            "use a virtual environment without habana-torch-plugin to emulate.",
            environ["HPU_PLUGIN_EMULATE"],
        )
        emulate = False

    if emulate:
        from hpu_plugin.emulation import EmulationError, check_environment

        try:  # a bad emulator setting stops here, before anything is exported or loaded
            check_environment()
        except EmulationError as exc:
            state.update(status="failed", reason=str(exc))
            log.error("hpu_plugin: %s", exc)
            return

    from hpu_plugin.registry import get_registry

    registry = get_registry()
    # The Gaudi software's own torch.backends entry point may have run before this one
    # (PyTorch does not order entry points); its runtime then read the environment first.
    initialised_first = real and "habana_frameworks.torch" in sys.modules
    unset = {name for name in _DEFAULTED if name not in environ}
    registry.prepare_environment(environ)
    late = sorted(name for name in unset if name in environ)
    if initialised_first and late:
        log.warning(
            "hpu_plugin: the Gaudi software initialised before hpu_plugin could set %s; the "
            "defaults may not apply to this process. Fix: export %s before starting Python.",
            ", ".join(late), " ".join(f"{name}={environ[name]}" for name in late),
        )
    if emulate:
        from hpu_plugin.emulation import EmulationError, start

        try:
            start()
        except EmulationError as exc:
            state.update(status="failed", reason=str(exc))
            log.error("hpu_plugin: %s", exc)
            return
        state["emulator"] = "started"
    import habana_frameworks.torch  # noqa: F401  real or emulated; creates torch.hpu

    from hpu_plugin.diagnostics.summary import gaudi_summary
    from hpu_plugin.hosts import install

    # Also without a device: the hosts' own HPU checks would otherwise look at the Gaudi
    # software directly and could say yes where a plugin said no.
    install(registry, gaudi_summary)
    if not registry.device_available():
        state.update(status="skipped", reason="Gaudi software present, but no device is ready")
        return
    state.update(status="active", reason="emulated Gaudi" if emulate else "Gaudi")
