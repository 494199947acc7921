"""Finding plugin entry points and importing them, timed.

A plugin's import runs inside ``import torch``. One slower than ``HPU_PLUGIN_IMPORT_BUDGET``
is reported by name (:mod:`.registry`), never interrupted: an exception raised into an import
can land inside another module's import or a lock, and cannot end a C call. A plugin whose
import never returns, or ends the process, is named by ``hpu-plugin doctor``, which imports
each plugin in a child process of its own (:mod:`hpu_plugin.diagnostics.imports`).
"""

from __future__ import annotations

import inspect
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata

from hpu_plugin import hookspecs

DIST_NAME = "hpu-plugin"
ENTRY_POINT_GROUP = hookspecs.PROJECT


@dataclass
class PluginRecord:
    """One entry point as ``hpu-plugin plugins`` shows it. ``status``: ``enabled``,
    ``faulted`` (registered, a hook of it faulted; still asked, since a fault may depend on
    the input; its ``faults``, the first is the ``reason``), ``disabled`` (by a switch) or
    ``failed`` (unusable; ``reason`` says why)."""

    name: str
    value: str
    distribution: str
    version: str
    first_party: bool
    status: str = "enabled"  # enabled | faulted | disabled | failed
    reason: str = ""
    hooks: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    import_seconds: float | None = None


def normalise(dist_name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", dist_name).lower()


def discover(path: list[str] | None = None, warn: Callable[..., None] | None = None
             ) -> list[metadata.EntryPoint]:
    """Every ``hpu_plugin`` entry point installed on ``path`` (default ``sys.path``), read
    distribution by distribution: ``metadata.entry_points()`` raises for all when one
    distribution has a malformed ``entry_points.txt``. The first of a name on the path wins."""
    seen: set[str] = set()
    found: list[metadata.EntryPoint] = []
    distributions = metadata.distributions() if path is None else metadata.distributions(path=path)
    for dist in distributions:
        try:
            name = normalise(getattr(dist, "_normalized_name", None) or dist.metadata["Name"] or "")
            if name in seen:
                continue
            seen.add(name)
            found.extend(ep for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP)
        except Exception as exc:  # one broken installation must not hide every plugin
            if warn is not None:
                warn("hpu_plugin: cannot read the entry points of %s (%r); its plugins, if "
                     "any, are skipped. Reinstall or remove that distribution.",
                     getattr(dist, "_path", None) or "an installed distribution", exc)
    return found


def record_for(ep: metadata.EntryPoint) -> PluginRecord:
    dist = getattr(ep, "dist", None)
    dist_name = dist.name if dist is not None else "?"
    if dist is not None:
        first_party = normalise(dist_name) == DIST_NAME
    else:  # an entry point handed in without its distribution (tests, embedders)
        first_party = ep.value.startswith("hpu_plugin.")
    return PluginRecord(name=ep.name, value=ep.value, distribution=dist_name,
                        version=dist.version if dist is not None else "?",
                        first_party=first_party)


def load_plugin(ep: metadata.EntryPoint) -> tuple[object, float]:
    """Import ``ep`` (a class is instantiated with no arguments): the plugin and the seconds
    its import took. Raises what the import raised."""
    start = time.perf_counter()
    plugin = ep.load()
    plugin = plugin() if inspect.isclass(plugin) else plugin
    return plugin, time.perf_counter() - start
