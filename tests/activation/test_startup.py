"""Interpreter start: without emulation nothing of the plugin or the emulator loads; with it,
the emulator's one start-up line (``hpu_emulator.pth``) makes its stand-ins findable before
``import torch``, as the real ``habana_frameworks`` is."""

from __future__ import annotations

import json

import pytest
from processes import run_python, scrubbed

PROBE = """
import importlib.util, json, sys
spec = importlib.util.find_spec("habana_frameworks")
print(json.dumps({
    "found": spec is not None,
    "hpu_plugin_loaded": any(m == "hpu_plugin" or m.startswith("hpu_plugin.") for m in sys.modules),
    "torch_loaded": "torch" in sys.modules,
}))
"""


def _probe(**env: str) -> dict[str, bool]:
    out = run_python(PROBE, scrubbed(**env), timeout=60, check=True)
    return json.loads(out.stdout)


def test_without_emulation_startup_imports_nothing_of_the_plugin() -> None:
    assert _probe() == {"found": False, "hpu_plugin_loaded": False, "torch_loaded": False}


def test_emulation_makes_habana_frameworks_findable_before_torch_is_imported() -> None:
    # Transformers calls find_spec("habana_frameworks") before importing torch, and Gaudi's
    # documents start scripts with import habana_frameworks.torch.core.
    result = _probe(HPU_PLUGIN_EMULATE="1")
    assert result["found"] is True
    assert result["torch_loaded"] is False


def test_emulation_makes_habana_frameworks_findable_from_import_torch_on() -> None:
    probe = "import torch\n" + PROBE
    out = run_python(probe, scrubbed(HPU_PLUGIN_EMULATE="1"), timeout=300, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1])["found"] is True


def test_emulation_switched_off_by_zero() -> None:
    assert _probe(HPU_PLUGIN_EMULATE="0")["found"] is False
    # and activation inside import torch does not put the stand-ins on the path either
    out = run_python("import torch\n" + PROBE, scrubbed(HPU_PLUGIN_EMULATE="0"), timeout=300,
                     check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1])["found"] is False


HOSTS_PROBE = """
import importlib.util, json, sys
import torch
from accelerate.utils import is_hpu_available
from transformers import TrainingArguments, is_torch_hpu_available
args = TrainingArguments(output_dir=sys.argv[1], report_to=[])
print(json.dumps({
    "found": importlib.util.find_spec("habana_frameworks") is not None,
    "transformers": is_torch_hpu_available(),
    "accelerate": is_hpu_available(),
    "device": args.device.type,
}))
"""


def _hosts_probe(tmp_path, **env: str) -> dict[str, object]:
    out = run_python(HOSTS_PROBE, scrubbed(**env), timeout=300, args=[str(tmp_path)])
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_disabled_plugin_with_emulation_requested_leaves_the_hosts_on_cpu(tmp_path) -> None:
    # The stand-ins must not be on the path when the whole plugin is off, or
    # Transformers and Accelerate would find "habana_frameworks" and take Gaudi branches.
    result = _hosts_probe(tmp_path, HPU_PLUGIN_EMULATE="1", HPU_PLUGIN_DISABLE="1")
    assert result == {"found": False, "transformers": False, "accelerate": False, "device": "cpu"}


def test_emulator_that_cannot_start_withdraws_its_stand_ins(tmp_path) -> None:
    # A bad emulator setting stops activation; the program goes on as without Gaudi.
    result = _hosts_probe(tmp_path, HPU_PLUGIN_EMULATE="1", HPU_PLUGIN_EMULATE_DEVICES="9")
    assert result == {"found": False, "transformers": False, "accelerate": False, "device": "cpu"}


def test_bad_plugin_switch_with_emulation_requested_leaves_the_hosts_on_cpu(tmp_path) -> None:
    result = _hosts_probe(tmp_path, HPU_PLUGIN_EMULATE="1", HPU_PLUGIN_NO_THIRD_PARTY="maybe")
    assert result == {"found": False, "transformers": False, "accelerate": False, "device": "cpu"}


def test_gaudi_software_initialised_before_the_plugin_is_reported(tmp_path) -> None:
    # PyTorch does not order torch.backends entry points: the Gaudi software's own one may
    # run first and read the environment before our defaults exist. Say so, with the fix.
    package = tmp_path / "habana_frameworks"
    (package / "torch").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "torch" / "__init__.py").write_text("")  # a stand-in that needs no device
    script = "import habana_frameworks.torch\nimport torch\nprint('imported')"
    out = run_python(script, scrubbed(PYTHONPATH=str(tmp_path)), timeout=120)
    assert out.returncode == 0 and "imported" in out.stdout, out.stderr[-2000:]
    assert "initialised before hpu_plugin could set" in out.stderr
    assert "export PT_ENABLE_INT64_SUPPORT=1 PT_HPU_LAZY_MODE=0" in out.stderr


HALF_STARTED = """
import json, os, sys
from hpu_emulator import startup
from hpu_plugin.registry import Registry
def fail(*args):
    raise RuntimeError("no room for hl-smi")
if sys.argv[1] == "emulator":  # the emulator fails after its runtime started
    startup._install_hlsmi_shim = fail
else:  # activation fails after the host adapters are installed
    Registry.device_available = fail
path = os.environ["PATH"]
import torch
from hpu_plugin import activation, hosts
from hpu_plugin.patching import is_ours
print(json.dumps({
    "status": activation.state["status"],
    "seed_is_ours": is_ours(torch.manual_seed),
    "path_same": os.environ["PATH"] == path,
    "hosts": hosts.installed(),
    "found": __import__("importlib.util").util.find_spec("habana_frameworks") is not None,
}))
"""


@pytest.mark.parametrize("where", ["emulator", "hosts"])
def test_an_activation_failing_half_way_takes_back_its_changes(where: str) -> None:
    # import torch still works; the emulator's torch.manual_seed and PATH entry, the host
    # adapters and the stand-ins are gone with the failed plugin
    out = run_python(HALF_STARTED, scrubbed(HPU_PLUGIN_EMULATE="1"), timeout=120, args=[where])
    assert out.returncode == 0, out.stderr[-3000:]
    # an emulator that started keeps its stand-ins: its device exists, as on a Gaudi machine
    # whose plugin is off
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "status": "failed", "seed_is_ours": False, "path_same": True, "hosts": False,
        "found": where == "hosts"}, out.stderr[-3000:]
    assert "no room for hl-smi" in out.stderr


def test_emulation_without_the_emulator_installed_names_the_fix(tmp_path) -> None:
    # import torch still works; the plugin is off and says how to get the emulator
    script = """
import json, sys
sys.modules["hpu_emulator"] = None  # as if hpu-emulator were not installed
import torch
from hpu_plugin import state
print(json.dumps({"status": state["status"], "hpu": hasattr(torch, "hpu")}))
"""
    out = run_python(script, scrubbed(HPU_PLUGIN_EMULATE="1"), timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"status": "failed", "hpu": False}
    assert "pip install 'hpu-plugin[emulator]'" in out.stderr
