"""PEFT's ``infer_device`` on Gaudi: ``hpu`` on the emulator, PEFT's own answer elsewhere.

The subprocess tests run real PEFT on a real ``import torch``: activation installs the
adapter (or, without Gaudi, does not), as for a user. The in-process tests use the answering
plugin for "Gaudi ready" and PEFT's real module.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from processes import emulated, run_python, scrubbed

from hpu_plugin.hosts import peft_adapter, support

pytest.importorskip("peft")

#: Every PEFT 0.21.2 module that binds infer_device by name at import (grep of its sources).
IMPORTERS = (
    "peft.utils.other",
    "peft.utils",
    "peft.peft_model",
    "peft.utils.save_and_load",
    "peft.utils.hotswap",
    "peft.optimizers.lorafa",
    "peft.tuners.lora.monteclora",
)

_ASK = f"""
    import json, sys
    import torch
    before = "peft" in sys.modules
    import importlib
    modules = [importlib.import_module(name) for name in {IMPORTERS!r}]
    from peft.utils.other import infer_device
    print(json.dumps({{
        "peft_before": before,
        "answers": [m.infer_device() for m in modules],
        "ours": [bool(getattr(m.infer_device, "__hpu_plugin__", False)) for m in modules],
    }}))
"""


def _asked(env: dict[str, str]) -> dict:
    done = run_python(_ASK, env, timeout=300, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.e2e
def test_infer_device_is_hpu_on_the_emulator_in_every_module_that_imported_it():
    result = _asked(emulated())
    assert result["peft_before"] is False  # activation imports no PEFT
    assert result["answers"] == ["hpu"] * len(IMPORTERS)
    assert all(result["ours"])


@pytest.mark.e2e
def test_without_gaudi_peft_is_left_as_it_is():
    result = _asked(scrubbed())
    assert result["peft_before"] is False
    assert result["answers"] == ["cpu"] * len(IMPORTERS)
    assert not any(result["ours"])


_LOAD = """
    import sys
    import torch
    from torch import nn
    from peft import LoraConfig, PeftModel, get_peft_model

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin0 = nn.Linear(10, 20)
            self.relu = nn.ReLU()
            self.lin1 = nn.Linear(20, 2)

        def forward(self, x):
            return self.lin1(self.relu(self.lin0(x)))

    folder = sys.argv[1]
    torch.manual_seed(0)
    config = LoraConfig(target_modules=["lin0"], modules_to_save=["lin1"], init_lora_weights=False)
    get_peft_model(MLP(), config).save_pretrained(folder)
    model = PeftModel.from_pretrained(
        MLP().to("hpu"), folder, torch_device="hpu", low_cpu_mem_usage=True
    )
    model.load_adapter(folder, adapter_name="other", low_cpu_mem_usage=True)
    print(sorted({p.device.type for p in model.parameters()}))
    saved = model.base_model.model.lin1.modules_to_save["other"].weight
    print(saved.device.type, model(torch.ones(3, 10, device="hpu")).device.type)
"""


@pytest.mark.e2e
def test_lora_load_adapter_without_a_device_lands_on_hpu(tmp_path: Path):
    """PEFT's test_load_model_low_cpu_mem_usage[Vanilla MLP 5 LoRA]: the second adapter's
    modules_to_save copy is loaded onto infer_device()."""
    done = run_python(_LOAD, emulated(), timeout=300, args=[str(tmp_path)], check=True)
    lines = done.stdout.strip().splitlines()
    assert lines[-2:] == ["['hpu']", "hpu hpu"]


def test_installed_answers_hpu_and_uninstall_restores_peft(installed, answers):
    import peft.peft_model
    from peft.utils import other

    assert other.infer_device() == "hpu"
    assert peft.peft_model.infer_device is other.infer_device
    from hpu_plugin import hosts

    hosts.uninstall()
    assert not getattr(other.infer_device, "__hpu_plugin__", False)
    assert peft.peft_model.infer_device is other.infer_device
    assert other.infer_device() == "cpu"


def test_an_accelerator_peft_found_keeps_its_answer(installed):
    """CUDA (or mps, xpu, ...) found by PEFT is never turned into hpu."""
    replacement = peft_adapter.make_infer_device(installed, lambda: "cuda")
    assert replacement() == "cuda"
    assert peft_adapter.make_infer_device(installed, lambda: "cpu")() == "hpu"


def test_no_gaudi_keeps_cpu(installed, answers):
    answers.available = False
    installed._available = None  # the registry caches its answer for the process
    assert peft_adapter.make_infer_device(installed, lambda: "cpu")() == "cpu"


@pytest.mark.parametrize(
    ("version", "known"),
    [("0.21.2", True), ("0.21.2+local", True), ("0.21.3", False), ("0.22.0", False),
     ("0.21.2rc1", False), ("?", False)],
)
def test_only_tested_releases_are_adapted(version, known):
    assert peft_adapter.known_release(version) is known


def test_the_tested_release_is_the_one_ci_pins():
    requirements = Path(__file__).resolve().parents[2] / "requirements" / "test.txt"
    assert f"peft=={support.PEFT_TESTED[-1]}" in requirements.read_text().split()


def test_the_tested_release_infer_device_takes_no_arguments():
    """What the replacement (no parameters) relies on, on the installed tested release."""
    import inspect

    from hpu_plugin.hosts.replacing import host_version

    if not peft_adapter.known_release(host_version("peft")):
        pytest.skip("not a tested PEFT release: the adapter stays out")
    from peft.utils import other

    assert not inspect.signature(other.infer_device).parameters
