"""The Gaudi section of ``accelerate env`` / ``transformers env`` (activation hands
:func:`gaudi_summary` to ``hosts.install``; the hosts never import this folder).

Users paste those commands' output into bug reports; the plugin's own view belongs next to
what the host itself found.
"""

from __future__ import annotations

import os

from hpu_plugin import __version__, state
from hpu_plugin.diagnostics import inventory
from hpu_plugin.gaudi.software import GAUDI_DISTRIBUTION


def gaudi_summary() -> dict[str, str]:
    """Never raises, imports no torch (it reads ``torch.hpu`` only if torch is already
    imported)."""
    try:
        summary = {
            "hpu-plugin version": __version__,
            # the emulator presents a habana-torch-plugin of its own: not the real software
            "Gaudi software": "emulated"
            if inventory.emulation_requested() and not inventory.gaudi_software()
            else inventory.version(GAUDI_DISTRIBUTION) or "not installed",
            "hpu-plugin status": f"{state['status']} ({state['reason']})",
            "Gaudi mode": inventory.mode_text(inventory.environ_with_defaults()),
            "HABANA_VISIBLE_MODULES": os.environ.get("HABANA_VISIBLE_MODULES", "unset"),
        }
        if inventory.device_available():
            hpu = inventory.hpu_module()
            summary["Gaudi devices"] = str(hpu.device_count())
            summary["Gaudi generation"] = str(hpu.get_device_name())
        return summary
    except Exception as exc:  # a diagnostic must not break the host's command
        return {"hpu-plugin": f"summary failed: {exc!r}"}
