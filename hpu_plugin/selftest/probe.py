"""The environment probe, run in a process of its own before any check: what Gaudi software
there is, whether the plugin activated, its plugins, and ``hl-smi``'s devices and driver.

It imports torch (which activates the plugin and, on the emulator, puts its ``hl-smi`` on
``PATH``) but uses no device: choosing which modules the checks may acquire comes first.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

from hpu_plugin.selftest import protocol

#: Asked of ``hl-smi`` for the report and for choosing free modules (no serials or UUIDs:
#: they identify the hardware and say nothing about a bug).
FIELDS = ("index", "module_id", "name", "memory.total", "memory.used", "driver_version")


def _hlsmi() -> dict[str, Any]:
    from hpu_plugin import machine

    answer = machine.query(FIELDS)
    result: dict[str, Any] = {"rows": answer.rows, "reason": answer.reason,
                              "missing": answer.missing}
    path = shutil.which("hl-smi")
    if path is not None:
        try:
            done = subprocess.run([path, "-v"], capture_output=True, text=True, timeout=10)
            result["version"] = (done.stdout or done.stderr).strip()[:300]
        except (OSError, subprocess.TimeoutExpired) as exc:
            result["version"] = f"hl-smi -v failed: {exc}"
    return result


def collect() -> dict[str, Any]:
    try:
        import torch
    except Exception as exc:
        return {"torch_error": f"{type(exc).__name__}: {exc}"}
    from hpu_plugin import state
    from hpu_plugin.gaudi.software import real_gaudi_installed
    from hpu_plugin.registry import get_registry

    hpu = getattr(torch, "hpu", None)
    try:
        available = bool(hpu is not None and hpu.is_available())
    except Exception:
        available = False
    try:
        plugins = [
            {"name": r.name, "distribution": r.distribution, "version": r.version,
             "status": r.status, "reason": r.reason, "first_party": r.first_party}
            for r in get_registry().records.values()
        ]
    except Exception as exc:  # a bad switch value: reported, not fatal here
        plugins = [{"error": str(exc)}]
    return {
        "activation": dict(state),
        "real_gaudi": real_gaudi_installed(),
        "hpu_available": available,
        "plugins": plugins,
        "hl_smi": _hlsmi(),
    }


if __name__ == "__main__":
    protocol.emit(protocol.PASS, "probe", collect())
