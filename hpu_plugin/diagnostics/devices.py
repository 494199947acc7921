"""``hpu-plugin devices``: each device's index, module id, generation, memory and visibility,
and whether one process per visible module would make a valid group."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from hpu_plugin.diagnostics import inventory


def _rows() -> tuple[list[dict[str, str]], str | None, str]:
    """Device rows from ``hl-smi``, or indices only from ``torch.hpu``; their source; and
    why there are none."""
    from hpu_plugin.gaudi import hlsmi

    answer = inventory.query_hlsmi(hlsmi.DEVICE_FIELDS)
    if answer.rows is None and not answer.missing and not answer.timed_out:
        answer = inventory.query_hlsmi(hlsmi.INDEX_MODULE_FIELDS)
    if answer.rows is not None:
        return answer.rows, "hl-smi", answer.reason
    if inventory.device_available():
        count = inventory.hpu_module().device_count()
        return [{"index": str(i)} for i in range(count)], "torch.hpu", answer.reason
    return [], None, answer.reason


def _device(row: Mapping[str, str], fallback_name: str, visible: Any) -> dict[str, Any]:
    from hpu_plugin.gaudi import hlsmi
    from hpu_plugin.gaudi.generations import generation_from_name

    name = row.get("name") or fallback_name
    generation = generation_from_name(name) if name else None
    module = row.get("module_id")
    module_id = int(module) if module is not None and module.isdigit() else None
    return {
        "index": int(row["index"]) if row.get("index", "").isdigit() else None,
        "module_id": module_id,
        "name": name or None,
        "generation": generation.name if generation else None,
        "memory_mib": hlsmi.parse_mib(row.get("memory.total", "")),
        "bus_id": row.get("bus_id"),
        "visible": visible is None or (module_id is not None and module_id in visible),
    }


def collect_devices() -> dict[str, Any]:
    from hpu_plugin.gaudi import visibility
    from hpu_plugin.gaudi.config_error import GaudiConfigError

    inventory.import_torch()
    result: dict[str, Any] = {"devices": [], "source": None, "message": "", "group": None}
    rows, result["source"], reason = _rows()
    if not rows:
        result["message"] = (
            inventory.no_gaudi_reason()
            if not inventory.gaudi_expected()
            else f"No Gaudi device found ({reason})."
        )
    elif result["source"] != "hl-smi" and reason:
        result["message"] = f"hl-smi gave no answer ({reason})."
    try:
        visible = visibility.visible_modules(os.environ)
        visible_error = ""
    except GaudiConfigError as exc:
        visible, visible_error = None, str(exc)
    fallback_name = inventory.device_name() if rows and "name" not in rows[0] else ""
    devices = [_device(row, fallback_name, visible) for row in rows]
    devices.sort(key=lambda d: (d["index"] is None, d["index"] or 0))
    result["devices"] = devices
    index_map = {
        d["index"]: d["module_id"]
        for d in devices
        if d["index"] is not None and d["module_id"] is not None
    }
    if visible_error:
        result["group"] = {"valid": False, "modules": None, "message": visible_error}
    elif index_map:
        chosen = visible if visible is not None else tuple(sorted(index_map.values()))
        result["group"] = group_status(chosen, index_map)
    return result


def group_status(chosen: Sequence[int], index_map: Mapping[int, int]) -> dict[str, Any]:
    """Would a job with one process per visible module work here?"""
    from hpu_plugin.gaudi import selection
    from hpu_plugin.gaudi.config_error import GaudiConfigError

    size = len(chosen)
    status: dict[str, Any] = {"modules": list(chosen), "layout": selection.host_layout(index_map)}
    if size <= 1:
        status.update(valid=True, message="a single device: fine for a job that is not distributed")
        return status
    try:
        placement = selection.check_distributed_job(os.environ, size, size, 0, index_map)
    except GaudiConfigError as exc:
        status.update(valid=False, message=str(exc))
        return status
    status.update(valid=True, message=placement.group, warnings=list(placement.warnings))
    return status
