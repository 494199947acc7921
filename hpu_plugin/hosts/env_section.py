"""The Gaudi section that ``accelerate env`` and ``transformers env`` gain.

Users paste those commands' output into bug reports; the plugin's own view (status,
mode, devices) belongs there, next to what the host itself found. That view is a report,
so it is ``diagnostics.summary``; diagnostics read the hosts, so the hosts cannot import it:
``hosts.install`` takes it from activation and keeps it here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

#: The plugin's brief report (``diagnostics.summary.gaudi_summary`` once activation installed
#: the hosts); None: the hosts were installed without one (tests), the section is empty.
summary: Callable[[], dict[str, str]] | None = None


def gaudi_section(shown: Mapping[str, str] | None = None) -> dict[str, str]:
    """``hpu-plugin info`` in brief, minus the keys the host already shows; never raises."""
    if summary is None:
        return {}
    try:
        lines = summary()
    except Exception as exc:  # a diagnostic must not fail the host's command
        return {"hpu-plugin": f"summary failed: {exc!r}"}
    return {key: value for key, value in lines.items() if key not in (shown or {})}
