"""Host adapters: make torch, Transformers, Accelerate, PEFT and sentence-transformers ask the
registry.

Each adapter finds one host's decision points and routes them through
``hpu_plugin.registry``; it never calls a plugin directly. Adapters are version-gated: what
each does on which release follows the tested releases in ``support``, and one that cannot
find what it expects logs one line naming the host and version and stays out. Transformers,
Accelerate, PEFT and sentence-transformers adapters are post-import hooks (``importhook``),
since activation runs inside ``import torch``, possibly half-way through a host's own import.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from hpu_plugin.patching import this_process
from hpu_plugin.registry import Registry

if TYPE_CHECKING:
    from hpu_plugin.patching import Patches

log = logging.getLogger("hpu_plugin")

_lock = threading.Lock()

#: Where ``this_process.stayed_out`` says why the installation failed (``failure()``).
_FAILED = ("hpu_plugin", "host adapters")


def install(registry: Registry, summary: Callable[[], dict[str, str]] | None = None,
            fast_paths: Callable[[Registry, Patches], None] | None = None) -> None:
    """Install the adapters once per process, into ``this_process.hosts``; never raises.

    With a device ready every adapter is installed, and then ``fast_paths`` (activation
    gives ``hpu_plugin.fast_paths.install``, which builds on the adapters: they cannot
    import it) with the same ``Patches``, so that one undo takes back both. Without a device
    (a plugin hid Gaudi, or the Gaudi software is present with no device) only the
    availability answers are, so the hosts' own HPU branches follow the registry and stay
    off. ``summary`` is what the hosts' ``env`` commands add
    (``diagnostics.summary.gaudi_summary``; none without it).
    """
    with _lock:
        if this_process.hosts_installed:
            return
        from hpu_plugin.hosts import (
            accelerate_adapter,
            peft_adapter,
            sentence_transformers_adapter,
            torch_adapter,
            transformers_adapter,
        )
        from hpu_plugin.patching import record_out

        this_process.stayed_out.clear()  # what stays out of this installation, from here on
        this_process.summary = summary
        this_process.hosts_installed = True
        patches = this_process.hosts
        try:
            available = registry.device_available()
            if available:
                torch_adapter.install(registry, patches)
                transformers_adapter.keep_gaudi_workarounds(patches)
                if fast_paths is not None:
                    fast_paths(registry, patches)
            transformers_adapter.install(registry, patches, available)
            accelerate_adapter.install(registry, patches, available)
            peft_adapter.install(registry, patches, available)
            sentence_transformers_adapter.install(registry, patches, available)
        except Exception as exc:  # activation must never break `import torch`
            from hpu_plugin import importhook

            log.error("hpu_plugin: installing the host adapters failed; they are off: %r", exc)
            # off means off: no adapter waits for a host imported later either, and what
            # stayed out of the partial installation is moot
            importhook.remove()
            patches.undo()
            this_process.stayed_out.clear()
            record_out(*_FAILED, f"installing them failed: {exc!r}")
            this_process.hosts_installed = False


def installed() -> bool:
    """Whether the adapters are installed in this process (the diagnostics report it)."""
    return this_process.hosts_installed


def failure() -> str | None:
    """Why installing the adapters failed in this process, if it did."""
    return this_process.stayed_out.get(" ".join(_FAILED))


def uninstall() -> None:
    """Undo every adapter and drop pending hooks (tests, and a clean ``hpu-plugin`` run)."""
    from hpu_plugin import importhook

    with _lock:
        importhook.remove()
        this_process.undo_hosts()
