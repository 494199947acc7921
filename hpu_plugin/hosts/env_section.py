"""The Gaudi section that ``accelerate env`` and ``transformers env`` gain.

Users paste those commands' output into bug reports; the plugin's own view (status,
mode, devices) belongs there, next to what the host itself found.
"""

from __future__ import annotations

from collections.abc import Mapping


def gaudi_section(shown: Mapping[str, str] | None = None) -> dict[str, str]:
    """``hpu-plugin info`` in brief, minus the keys the host already shows; never raises."""
    try:
        from hpu_plugin.diagnostics.summary import gaudi_summary

        summary = gaudi_summary()
    except Exception as exc:  # a diagnostic must not fail the host's command
        return {"hpu-plugin": f"summary failed: {exc!r}"}
    return {key: value for key, value in summary.items() if key not in (shown or {})}
