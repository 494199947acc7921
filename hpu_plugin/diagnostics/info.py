"""``hpu-plugin info``: versions, activation, mode, plugins, hooks, and the decisions now."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from hpu_plugin import __version__
from hpu_plugin.diagnostics import inventory
from hpu_plugin.gaudi import migration
from hpu_plugin.gaudi.software import GAUDI_DISTRIBUTION
from hpu_plugin.patching import this_process


def _decide(call: Callable[[], Any]) -> str:
    from hpu_plugin.hookspecs import Refusal

    try:
        result = call()
    except Refusal as exc:
        return f"refused: {exc}"
    except Exception as exc:
        return f"failed: {exc!r}"
    return "no opinion" if result is None else repr(result)


def _versions() -> dict[str, str | None]:
    return {
        "hpu-plugin": __version__,
        "python": sys.version.split()[0],
        "torch": inventory.version("torch"),
        "transformers": inventory.version("transformers"),
        "accelerate": inventory.version("accelerate"),
        "pluggy": inventory.version("pluggy"),
        # the emulator presents a habana-torch-plugin of its own: not the real software
        "gaudi_software": "emulated"
        if inventory.emulation_requested() and not inventory.gaudi_software()
        else inventory.version(GAUDI_DISTRIBUTION),
    }


def _decisions(registry: Any) -> tuple[bool, dict[str, str]]:
    """Ask every deciding hook what it would answer now, as the hosts would."""
    decisions: dict[str, str] = {}
    available = _decide(registry.device_available)
    decisions["hpu_device_available"] = available
    if available != "True":
        return False, decisions
    decisions["hpu_device_properties"] = _decide(registry.device_properties)
    decisions["hpu_compile_backend(None)"] = _decide(
        lambda: registry.compile_backend(None)
    )
    decisions["hpu_compile_backend('inductor')"] = _decide(
        lambda: registry.compile_backend("inductor")
    )
    decisions["hpu_ddp_backend(None)"] = _decide(lambda: registry.ddp_backend(None))
    if migration.loaded():  # CUDA scripts name nccl: what the toolkit will run it as
        decisions["hpu_ddp_backend('nccl')"] = _decide(
            lambda: registry.ddp_backend("nccl")
        )
    decisions["hpu_quantization_device_map(bitsandbytes, 4, None)"] = _decide(
        lambda: registry.quantization_device_map("bitsandbytes", 4, None)
    )
    for kind in ("length", "batch", "cache"):
        decisions[f"hpu_shape_buckets({kind}, 4096)"] = _decide(
            lambda kind=kind: registry.shape_buckets(kind, 4096)
        )
    return True, decisions


def _present(needs: str) -> bool:
    """Whether the Gaudi software here has the kernel a fast path calls."""
    import importlib

    module, _, name = needs.partition(":")
    try:
        if module == "torch.ops.hpu":
            import torch

            return hasattr(torch.ops.hpu, name)
        if module == "torch.compile":
            import torch._dynamo

            return name in torch._dynamo.list_backends(exclude_tags=())
        return hasattr(importlib.import_module(module), name)
    except Exception:
        return False


def _fast_paths(registry: Any) -> dict[str, dict[str, str]]:
    """Each of Gaudi's fast paths: on or off as the hook answers now, and its switch."""
    from hpu_plugin.fast_paths.decisions import FAST_PATHS

    return {
        path.name: {
            "state": _decide(lambda path=path: "on" if registry.fast_path(
                path.name, {}) else "off").strip("'"),
            "setting": path.setting, "replaces": path.replaces, "by": path.by,
            "kernel": "present" if _present(path.needs) else f"missing ({path.needs})",
        }
        for path in FAST_PATHS
    }


def _import_time_compiles() -> int:
    """``torch.compile`` calls libraries made while imported in this process: their backend
    was replaced, logged at debug (the user did not write them)."""
    adapter = sys.modules.get("hpu_plugin.hosts.torch_adapter")
    return len(getattr(adapter, "import_time_decorations", ()))


def collect_info() -> dict[str, Any]:
    activation = inventory.import_torch()
    environ = inventory.environ_with_defaults()
    # tested, untested, out of range; adapters left out
    from hpu_plugin.diagnostics import host_releases

    info: dict[str, Any] = {
        "versions": _versions(),
        "support": host_releases.report(),
        "gaudi": inventory.gaudi_expected(),
        "emulated": inventory.emulation_requested() and not inventory.gaudi_software(),
        "activation": activation,
        "mode": inventory.mode_text(environ),
        "available": False,
        "message": "" if inventory.gaudi_expected() else inventory.no_gaudi_reason(),
        "import_time_compiles": _import_time_compiles(),
        "patched": this_process.made(),
        "gpu_migration": migration.state(environ),
    }
    from hpu_plugin.registry import get_registry

    try:
        registry = get_registry()
    except Exception as exc:  # a bad switch value: report it
        info["plugins"] = {"error": str(exc)}
        info["hooks"] = {}
        info["hook_kinds"] = {}
        info["decisions"] = {}
        return info
    info["plugins"] = {
        name: {"status": r.status, "distribution": r.distribution, "hooks": list(r.hooks)}
        for name, r in registry.records.items()
    }
    info["hooks"] = {hook: registry.call_order(hook) for hook in inventory.HOOKS}
    info["hook_kinds"] = {hook: registry.call_order_detail(hook) for hook in inventory.HOOKS}
    info["decisions"] = {}
    if inventory.gaudi_expected():
        info["available"], info["decisions"] = _decisions(registry)
        if info["available"]:
            info["fast_paths"] = _fast_paths(registry)
    return info
