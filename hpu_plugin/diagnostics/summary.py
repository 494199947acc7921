"""The Gaudi section of ``accelerate env`` / ``transformers env`` (via ``hosts.env_section``).

Users paste those commands' output into bug reports; the plugin's own view belongs next to
what the host itself found.
"""

from __future__ import annotations

import os

from hpu_plugin import __version__
from hpu_plugin.diagnostics import probe
from hpu_plugin.gaudi.software import GAUDI_DISTRIBUTION


def gaudi_summary() -> dict[str, str]:
    """Never raises, imports no torch (it reads ``torch.hpu`` only if torch is already
    imported)."""
    try:
        from hpu_plugin import activation

        summary = {
            "hpu-plugin version": __version__,
            # the emulator presents a habana-torch-plugin of its own: not the real software
            "Gaudi software": "emulated"
            if probe.emulation_requested() and not probe.gaudi_software()
            else probe.version(GAUDI_DISTRIBUTION) or "not installed",
            "hpu-plugin status": f"{activation.state['status']} ({activation.state['reason']})",
            "Gaudi mode": probe.mode_text(probe.environ_with_defaults()),
            "HABANA_VISIBLE_MODULES": os.environ.get("HABANA_VISIBLE_MODULES", "unset"),
        }
        if probe.device_available():
            hpu = probe.hpu_module()
            summary["Gaudi devices"] = str(hpu.device_count())
            summary["Gaudi generation"] = str(hpu.get_device_name())
        return summary
    except Exception as exc:  # a diagnostic must not break the host's command
        return {"hpu-plugin": f"summary failed: {exc!r}"}
