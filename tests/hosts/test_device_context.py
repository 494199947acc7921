"""``torch.hpu.device`` restores nothing its enter did not change (the torch adapter).

The Gaudi bridge's exit calls ``set_device(-1)`` after ``set_device(0)`` when no module id is
set, which asserts with fewer than 8 modules visible: every ``torch.utils.checkpoint`` (TRL's
default gradient checkpointing) failed on a one-Gaudi machine. The emulator keeps that fault;
the adapter answers it where the probe of the bridge's own code finds it.
"""

from __future__ import annotations

import json
import types

import pytest
from processes import emulated, run_python

from hpu_plugin import patching
from hpu_plugin.diagnostics import releases as support
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
    result["patched"] = [p for p in hosts.patched() if p.startswith("device.")]
    hosts.uninstall()  # the bridge's own exit, as the emulator keeps it
    try:
        grads(False)
        result["bridge"] = "passed"
    except AssertionError as exc:
        result["bridge"] = str(exc)
    print(json.dumps(result))
"""

#: What a probe of code it should not run would leave behind.
TOUCHED: list[str] = []


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


# -- the guard: the bridge's own code, probed ------------------------------------------------

calls: list[object] = []


def set_device(device: object) -> None:
    """The module-level name the probed classes below call, as the bridge's do."""
    calls.append(device)


set_device.current_device_idx = 0  # type: ignore[attr-defined]


class FaultyDevice:
    """The 1.19 bridge's rule: the exit selects ``idx`` whenever ``prev_idx`` differs."""

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


class RestoringDevice(FaultyDevice):
    """CUDA's rule: the exit restores what the enter replaced, nothing else."""

    def __exit__(self, *exc: object) -> bool:
        if self.idx != -1 and self.prev_idx != self.idx and self.prev_idx != -1:
            set_device(self.prev_idx)
        return False


def _bridge(device_class: type | None) -> types.ModuleType:
    module = types.ModuleType("habana_frameworks.torch.hpu")
    if device_class is not None:  # a class of its own, with the context code in its __dict__
        module.device = type("device", (device_class,), {
            "__enter__": device_class.__enter__, "__exit__": device_class.__exit__,
        })
    return module


def test_the_adapter_answers_the_fault_and_leaves_the_bridge_module_alone():
    calls.clear()
    bridge, patches = _bridge(FaultyDevice), Patches()
    torch_adapter.install_device_context(patches, bridge)
    try:
        assert calls == []  # the probe never reached the module's set_device
        assert patching.stayed_out == {}
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


@pytest.mark.parametrize(
    ("device_class", "reason", "severity"),
    [
        (RestoringDevice, "not needed: the exit of habana-torch-plugin", "info"),
        (None, "has no torch.hpu.device class with __enter__ and __exit__", "warning"),
    ],
)
def test_staying_out_is_reported(device_class, reason, severity):
    patches = Patches()
    torch_adapter.install_device_context(patches, _bridge(device_class))
    assert patches.made == []
    result = support.report(probe=False)
    result["adapters"] = {"stayed_out": dict(patching.stayed_out), "note": ""}
    said = result["adapters"]["stayed_out"]["habana-torch-plugin torch.hpu.device exit"]
    assert reason in said
    assert "Host adapters that stayed out:" in support.report_lines(result)
    found = [f for f in support.findings(result) if f.check == "adapters"]
    assert [f.severity for f in found] == [severity]
    assert "torch.hpu.device exit" in found[0].message


def test_a_bridge_whose_context_calls_other_code_is_left_alone():
    """The probe runs only code that names idx, prev_idx and set_device: anything else
    could change the machine, so the adapter stays out unprobed."""

    class Other(FaultyDevice):
        def __exit__(self, *exc: object) -> bool:
            if self.prev_idx != self.idx:
                set_device(self.idx)
            TOUCHED.append("exit")  # what a probe of unknown code could do to the machine
            return False

    TOUCHED.clear()
    patches = Patches()
    torch_adapter.install_device_context(patches, _bridge(Other))
    assert TOUCHED == []
    assert patches.made == []
    assert "of the kind read in 1.19.0" in patching.stayed_out[
        "habana-torch-plugin torch.hpu.device exit"
    ]


def test_a_context_the_probe_cannot_read_or_build_is_left_alone():
    """A closure hides the names it calls; a class that cannot be built without arguments
    would raise inside the probe: both stay out, and no other adapter is touched."""

    def hidden(function):
        def wrapper(self, *exc):
            return function(self, *exc)
        return wrapper

    class Wrapped(FaultyDevice):
        __exit__ = hidden(FaultyDevice.__exit__)

    class NeedsArguments(FaultyDevice):
        def __new__(cls, needed):
            return super().__new__(cls)

    for device_class in (Wrapped, NeedsArguments):
        patches = Patches()
        torch_adapter.install_device_context(patches, _bridge(device_class))
        assert patches.made == [], device_class
        assert "habana-torch-plugin torch.hpu.device exit" in patching.stayed_out
