"""``torch.hpu.device`` restores nothing its enter did not change (the torch adapter).

The Gaudi bridge's exit calls ``set_device(-1)`` after ``set_device(0)`` when no module id is
set, which asserts with fewer than 8 modules visible: every ``torch.utils.checkpoint`` (TRL's
default gradient checkpointing) fails on a one-Gaudi machine without the adapter. The
emulator keeps that fault; the adapter answers it on the bridge releases that have it.
"""

from __future__ import annotations

import json
import types

import pytest
from processes import emulated, run_python

from hpu_plugin import patching
from hpu_plugin.diagnostics import host_releases as support
from hpu_plugin.hosts import support as hosts_support
from hpu_plugin.hosts import torch_adapter
from hpu_plugin.patching import Patches

_CHECKPOINT = """
    import json, os
    import torch
    from torch.utils.checkpoint import checkpoint

    def grads(reentrant):
        torch.manual_seed(0)
        layer = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5),
                                    torch.nn.Linear(8, 2)).to("hpu")
        x = torch.randn(4, 8).to("hpu").requires_grad_()
        torch.hpu.manual_seed(1)
        if reentrant is None:
            out = layer(x)
        else:
            out = checkpoint(layer, x, use_reentrant=reentrant)
        out.square().sum().backward()
        return x.grad.cpu()

    torch.hpu.set_device(0)  # as Accelerate does for its process
    plain = grads(None)
    result = {
        f"max_diff_{r}": float((grads(r) - plain).abs().max()) for r in (False, True)
    }
    result["module_id"] = os.environ.get("HLS_MODULE_ID")
    from hpu_plugin import hosts
    from hpu_plugin.patching import this_process
    result["patched"] = [p for p in this_process.hosts.made if p.startswith("device.")]
    hosts.uninstall()  # the bridge's own exit, as the emulator keeps it
    try:
        grads(False)
        result["bridge"] = "passed"
    except AssertionError as exc:
        result["bridge"] = str(exc)
    print(json.dumps(result))
"""

@pytest.mark.e2e
def test_checkpoint_after_set_device_0_on_one_module_equals_no_checkpoint():
    """A plain ``torch.utils.checkpoint`` (both variants; dropout shows the RNG state is
    restored for the recomputation) on one visible emulated module, as a user writes it."""
    done = run_python(_CHECKPOINT, emulated(HPU_PLUGIN_EMULATE_DEVICES="1"), timeout=300,
                      check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["max_diff_False"] == 0.0 and result["max_diff_True"] == 0.0
    assert result["module_id"] is None  # nothing written for child processes to inherit
    assert result["patched"] == ["device.__exit__"]
    assert "the only supported device idx is 0" in result["bridge"]


# -- the gate: the bridge's release ----------------------------------------------------------

calls: list[object] = []


def set_device(device: object) -> None:
    """The module-level name the classes below call, as the bridge's do."""
    calls.append(device)


set_device.current_device_idx = 0  # type: ignore[attr-defined]


class FaultyDevice:
    """The bridge's rule: the exit selects ``idx`` whenever ``prev_idx`` differs."""

    def __init__(self, device: object) -> None:
        self.idx, self.prev_idx = -1, -1

    def __enter__(self) -> None:
        self.prev_idx = set_device.current_device_idx  # type: ignore[attr-defined]
        if self.idx != -1 and self.idx != self.prev_idx:
            set_device(self.idx)

    def __exit__(self, *exc: object) -> bool:
        if self.prev_idx != self.idx and self.prev_idx != -1:
            set_device(self.idx)
        return False


def _bridge(device_class: type | None) -> types.ModuleType:
    module = types.ModuleType("habana_frameworks.torch.hpu")
    if device_class is not None:  # a class of its own, with the context code in its __dict__
        module.device = type("device", (device_class,), {
            "__enter__": device_class.__enter__, "__exit__": device_class.__exit__,
        })
    return module


@pytest.mark.parametrize("version", ["1.19.0", "1.19.0.561", "1.22.1.6", "2.0.0"])
def test_the_adapter_answers_the_fault_and_leaves_the_bridge_module_alone(version):
    calls.clear()
    bridge, patches = _bridge(FaultyDevice), Patches()
    torch_adapter.install_device_context(patches, bridge, bridge_version=version)
    try:
        assert patching.this_process.stayed_out == {}
        assert patches.made == ["device.__exit__"]
        with bridge.device(0):
            pass
        assert calls == []  # the bridge's exit: set_device(-1)
        assert vars(bridge.device)["__exit__"].__wrapped__ is FaultyDevice.__exit__
        context = bridge.device(0)
        context.idx = 3  # a module id: the enter selects it, and the bridge's exit runs
        with context:
            pass
        assert calls == [3, 3]
    finally:
        patches.undo()
    calls.clear()
    with bridge.device(0):
        pass
    assert calls == [-1]  # undone: the bridge's own exit again


def test_a_context_without_the_bridge_attributes_keeps_its_own_exit():
    bridge, patches = _bridge(FaultyDevice), Patches()
    torch_adapter.install_device_context(patches, bridge, bridge_version="1.19.0")
    try:
        context = bridge.device(0)
        del context.idx, context.prev_idx
        calls.clear()
        with pytest.raises(AttributeError):  # the bridge's own exit, not a silent skip
            context.__exit__(None, None, None)
    finally:
        patches.undo()


@pytest.mark.parametrize(
    ("version", "device_class", "reason"),
    [
        ("1.18.0.524", FaultyDevice, "habana-torch-plugin 1.18.0.524 is older than 1.19.0"),
        ("?", FaultyDevice, "habana-torch-plugin ? is not a release that can be read"),
        ("1.19.0", None, "has no torch.hpu.device class with __enter__ and __exit__"),
    ],
)
def test_staying_out_is_reported(version, device_class, reason):
    patches = Patches()
    bridge = _bridge(device_class)
    torch_adapter.install_device_context(patches, bridge, bridge_version=version)
    assert patches.made == []
    if device_class is not None:
        assert "__hpu_plugin__" not in vars(vars(bridge.device)["__exit__"])
    result = support.report(probe=False)
    result["adapters"] = {"stayed_out": dict(patching.this_process.stayed_out), "note": ""}
    said = result["adapters"]["stayed_out"]["habana-torch-plugin torch.hpu.device exit"]
    assert reason in said
    assert "Host adapters that stayed out:" in support.report_lines(result)
    found = [f for f in support.findings(result) if f.check == "adapters"]
    assert [f.severity for f in found] == ["warning"]
    assert "torch.hpu.device exit" in found[0].message


def test_the_gate_is_the_support_matrix_release():
    assert torch_adapter.bridge_has_device_exit_fault(
        hosts_support.BRIDGE_DEVICE_EXIT_FAULT_SINCE
    )
    assert torch_adapter.bridge_has_device_exit_fault("1.19.0rc1")
    assert not torch_adapter.bridge_has_device_exit_fault("1.18.1")
    assert torch_adapter.bridge_has_device_exit_fault("not a version") is None


def test_the_emulated_bridge_is_a_release_with_the_fault():
    """The emulator keeps the fault, so its bridge's release is one the gate adapts."""
    from importlib import metadata

    from hpu_emulator.runtime import STANDINS

    found = list(metadata.distributions(name="habana-torch-plugin", path=[str(STANDINS)]))
    assert found
    assert torch_adapter.bridge_has_device_exit_fault(found[0].version)
