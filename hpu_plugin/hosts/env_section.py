"""The Gaudi section that ``accelerate env`` and ``transformers env`` gain.

Users paste those commands' output into bug reports; the plugin's own view (status,
mode, devices) belongs there, next to what the host itself found. That view is a report,
so it is ``diagnostics.summary``; diagnostics read the hosts, so the hosts cannot import it:
activation hands it to ``hosts.install``, which keeps it on ``this_process``.
"""

from __future__ import annotations

from collections.abc import Mapping

from hpu_plugin.patching import this_process


def gaudi_section(shown: Mapping[str, str] | None = None) -> dict[str, str]:
    """``hpu-plugin info`` in brief, minus the keys the host already shows; never raises."""
    summary = this_process.summary  # None: installed without one (tests), the section is empty
    if summary is None:
        return {}
    try:
        lines = summary()
    except Exception as exc:  # a diagnostic must not fail the host's command
        return {"hpu-plugin": f"summary failed: {exc!r}"}
    return {key: value for key, value in lines.items() if key not in (shown or {})}
