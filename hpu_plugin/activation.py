"""What runs inside ``import torch`` when there may be Gaudi to serve.

The package root's ``autoload`` answers the common case (no Gaudi software, no switch) and
hands everything else here. PyTorch turns an exception raised in the entry point into a
failed ``import torch`` for every program on the machine, so :func:`autoload` never raises:
a fault is logged once and the plugin stays off, with what it changed taken back. The
emulator, when requested, is reached through ``hpu_plugin.emulator`` only.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING

from hpu_plugin import NO_GAUDI, state  # the package root: already loaded

if TYPE_CHECKING:
    from hpu_plugin.registry import Registry

log = logging.getLogger("hpu_plugin")


def autoload() -> None:
    """The full activation, from ``hpu_plugin.autoload``; idempotent; never raises."""
    if state["status"] != "off":
        return
    finders = list(sys.meta_path)
    try:
        _activate()
    except KeyboardInterrupt:  # Ctrl-C is the user's; what activation changed goes back
        state.update(status="failed", reason="interrupted")
        raise
    except BaseException as exc:  # never break `import torch`; SystemExit included
        state.update(status="failed", reason=f"{type(exc).__name__}: {exc}")
        log.error("hpu_plugin: activation failed, the plugin is off: %s", state["reason"])
    finally:
        _take_back(finders)


def _take_back(finders: list[object]) -> None:
    """A plugin that ends failed leaves the process as it found it: exported defaults would
    reach child processes as the user's, installed adapters would ask a plugin that is off,
    stand-ins found without a running emulator would send hosts into their Gaudi branches,
    and a broken import finder a plugin's import added (it may be why activation failed)
    would fail every import after ``import torch``. (A loaded runtime and a registered
    ``torch.hpu`` stay: torch cannot take either back; nor do finders that work, which
    modules still loaded may need.)"""
    if state["status"] != "failed":
        return
    sys.meta_path[:] = [finder for finder in sys.meta_path
                        if finder in finders or _finds_quietly(finder)]
    try:
        from hpu_plugin import importhook
        from hpu_plugin.patching import this_process

        this_process.environment.undo()
        importhook.remove()  # only what activation got as far as: each undo is a no-op else
        this_process.undo_hosts()
        this_process.emulator.undo()
        if state.get("emulator") != "started":
            this_process.search_path.undo()
    except Exception as exc:
        log.error("hpu_plugin: could not take back what activation changed: %r", exc)


def _finds_quietly(finder: object) -> bool:
    """Does ``finder`` answer a look-up of a module nobody has without raising?"""
    try:
        finder.find_spec("hpu_plugin_no_such_module", None)  # type: ignore[attr-defined]
    except Exception:
        return False
    return True


def _export_defaults(registry: Registry) -> list[str]:
    """The ``hpu_prepare_environment`` hooks fill a copy of the environment; what they added
    is exported through ``this_process.environment`` (recorded: taken back on failure, told
    apart from the user's by the diagnostics). Returns the names set."""
    from hpu_plugin.patching import this_process

    proposed = dict(os.environ)
    registry.prepare_environment(proposed)
    # Only defaults: a variable the user set stays as the user set it, whatever a hook did
    # to the copy (the spec says setdefault), and only text can be exported.
    ignored = sorted(name for name in os.environ if proposed.get(name) != os.environ[name])
    ignored += sorted(name for name, value in proposed.items()
                      if name not in os.environ and not isinstance(value, str))
    if ignored:
        log.warning("hpu_plugin: an hpu_prepare_environment hook changed or removed %s, or set "
                    "it to a value that is not text; ignored: a plugin may only add defaults "
                    "as text (environ.setdefault(name, 'value'))", ", ".join(ignored))
    changed = sorted(name for name, value in proposed.items()
                     if name not in os.environ and isinstance(value, str))
    for name in changed:
        this_process.environment.setenv(name, proposed[name])
    return changed


def _fail(reason: str) -> None:
    """The plugin stays off: say why, and keep the reason for ``info`` and ``doctor``."""
    state.update(status="failed", reason=reason)
    log.error("hpu_plugin: %s", reason)


def _activate() -> None:
    from hpu_plugin import settings
    from hpu_plugin.gaudi import environment, migration, tuning
    from hpu_plugin.gaudi.software import real_gaudi_installed

    environ = os.environ
    if settings.is_on(environ.get("HPU_PLUGIN_DISABLE")):
        state.update(status="skipped", reason="HPU_PLUGIN_DISABLE is set")
        return
    typos = tuning.misspelt(environ)
    if typos:  # even where the plugin would be off: HPU_PLUGIN_EMULAT=1 meant it on
        return _fail("; ".join(map(str, typos)))
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

    from hpu_plugin import emulator

    def refused(by: str = "") -> bool:
        """A missing emulator or a bad setting stops activation here, before the work."""
        try:
            if emulate:
                emulator.check_settings()
            # each read later: deep inside train() and generate(), or by the Gaudi software
            faults = [*environment.faults(environ), *migration.faults(environ),
                      *tuning.faults(environ)]
        except emulator.EmulatorError as exc:
            faults = [exc]
        if faults:
            _fail(by + "; ".join(str(f) for f in faults))
        return bool(faults)

    if refused():
        return

    from hpu_plugin.registry import get_registry

    registry = get_registry()
    # The Gaudi software's own torch.backends entry point may have run before this one
    # (PyTorch does not order entry points); its runtime then read the environment first.
    initialised_first = real and "habana_frameworks.torch" in sys.modules
    late = _export_defaults(registry)
    if refused("a plugin's hpu_prepare_environment set a default that is not usable (set "
               "the variable yourself, or turn that plugin off): "):
        return
    if initialised_first and late:
        log.warning(
            "hpu_plugin: the Gaudi software initialised before hpu_plugin could set %s; the "
            "defaults may not apply to this process. Fix: export %s before starting Python.",
            ", ".join(late), " ".join(f"{name}={environ[name]}" for name in late),
        )
    if emulate:
        try:
            emulator.start()
        except emulator.EmulatorError as exc:
            return _fail(str(exc))
        state["emulator"] = "started"
    import habana_frameworks.torch  # noqa: F401  real or emulated; creates torch.hpu

    from hpu_plugin import fast_paths
    from hpu_plugin.diagnostics.summary import gaudi_summary
    from hpu_plugin.hosts import install

    # Also without a device: the hosts' own HPU checks would otherwise look at the Gaudi
    # software directly and could say yes where a plugin said no.
    install(registry, gaudi_summary, fast_paths.install)
    if not registry.device_available():
        state.update(status="skipped", reason="Gaudi software present, but no device is ready")
        return
    state.update(status="active", reason="emulated Gaudi" if emulate else "Gaudi")
