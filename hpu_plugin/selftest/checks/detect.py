"""Device and generation detection: what torch, the plugin, Transformers and ``hl-smi`` say
about this process's Gaudi agree, and the plugin is active."""

from __future__ import annotations

from typing import Any

from hpu_plugin.selftest.harness import CheckFailed, acquire, chosen_module, require, run


def body() -> tuple[str, dict[str, Any]]:
    torch = acquire()
    from hpu_plugin import machine, state
    from hpu_plugin.gaudi import generations
    from hpu_plugin.registry import get_registry

    require(
        state.get("status") == "active",
        f"the plugin is not active: {state}",
    )
    name = str(torch.hpu.get_device_name())
    generation = generations.generation_from_name(name)
    require(generation is not None, f"torch.hpu.get_device_name() = {name!r}: not a Gaudi name")
    properties = get_registry().device_properties()
    require(properties is not None, "no plugin answered hpu_device_properties")
    require(
        properties.generation == generation.name,
        f"the plugin says {properties.generation!r}, torch.hpu says {name!r}",
    )
    from transformers import is_torch_hpu_available

    require(is_torch_hpu_available(), "transformers.is_torch_hpu_available() is False")
    answer = machine.query(("index", "module_id", "name"))
    if answer.rows is None:
        raise CheckFailed(f"hl-smi cannot be read: {answer.reason}")
    module = chosen_module()
    listed = {row["module_id"]: row["name"] for row in answer.rows}
    if module != "?":
        require(module in listed, f"module {module} is not in hl-smi's list {sorted(listed)}")
        smi_generation = generations.generation_from_name(listed[module])
        require(
            smi_generation == generation,
            f"hl-smi calls module {module} {listed[module]!r}, torch.hpu says {name!r}",
        )
    details = {
        "device_name": name,
        "generation": generation.name,
        "device_count": torch.hpu.device_count(),
        "module": module,
        "hl_smi_devices": len(answer.rows),
    }
    return f"{name} (module {module}), {len(answer.rows)} device(s) on hl-smi", details


if __name__ == "__main__":
    run("detect", body)
