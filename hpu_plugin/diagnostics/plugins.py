"""``hpu-plugin plugins``: every plugin in the entry-point group, its status and hooks."""

from __future__ import annotations

from typing import Any

from hpu_plugin.diagnostics.inventory import HOOKS, import_torch


def collect_plugins() -> dict[str, Any]:
    from hpu_plugin.registry import get_registry
    from hpu_plugin.switches import disable_value

    import_torch()  # where a program builds the registry (nothing with no Gaudi to look at)
    try:
        registry = get_registry()
    except Exception as exc:
        return {"error": str(exc), "plugins": [], "call_order": {}, "hook_kinds": {}}
    plugins = [
        {
            "name": r.name,
            "entry_point": r.value,
            "distribution": r.distribution,
            "version": r.version,
            "first_party": r.first_party,
            "status": r.status,
            "reason": r.reason,
            "hooks": list(r.hooks),
            "disable_with": disable_value(r),
        }
        for r in registry.records.values()
    ]
    return {
        "error": "",
        "plugins": plugins,
        "call_order": {hook: registry.call_order(hook) for hook in HOOKS},
        "hook_kinds": {hook: registry.call_order_detail(hook) for hook in HOOKS},
    }
