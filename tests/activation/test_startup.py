"""Interpreter start: nothing of the plugin or the emulator runs before ``import torch``, with
or without emulation; the stand-ins come with the emulator inside ``import torch``, and
``python -m hpu_emulator run`` gives a program them from its first line, as the real
``habana_frameworks`` is there on a Gaudi machine."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from processes import run, run_python, scrubbed

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


def _launched(code: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m hpu_emulator run python -c code``: what a user types."""
    return run([sys.executable, "-m", "hpu_emulator", "run", sys.executable, "-c",
                textwrap.dedent(code), *args], env, 300)


@pytest.mark.parametrize("emulate", ["", "1"])
def test_startup_runs_nothing_of_the_plugin_or_the_emulator(emulate: str) -> None:
    # no start-up line: until torch is imported, the program is as without the packages
    assert _probe(HPU_PLUGIN_EMULATE=emulate) == {
        "found": False, "hpu_plugin_loaded": False, "torch_loaded": False}


def test_emulation_makes_habana_frameworks_findable_from_import_torch_on() -> None:
    probe = "import torch\n" + PROBE
    out = run_python(probe, scrubbed(HPU_PLUGIN_EMULATE="1"), timeout=300, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1])["found"] is True


def test_the_launcher_makes_habana_frameworks_importable_before_torch() -> None:
    # Gaudi's documents start scripts with import habana_frameworks.torch.core; emulation is
    # requested by the launcher itself
    out = _launched(PROBE, scrubbed())
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout) == {
        "found": True, "hpu_plugin_loaded": False, "torch_loaded": False}
    script = """
        import habana_frameworks.torch.core as htcore
        import torch
        x = torch.ones(3, device="hpu") * 2
        htcore.mark_step()
        print(x.device.type, x.sum().item())
    """
    out = _launched(script, scrubbed())
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["hpu", "6.0"]


@pytest.mark.parametrize(("setting", "named"), [
    ({"HPU_PLUGIN_EMULATE": "0"}, "HPU_PLUGIN_EMULATE='0'"),
    ({"HPU_PLUGIN_DISABLE": "1"}, "HPU_PLUGIN_DISABLE='1'"),
    ({"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, "TORCH_DEVICE_BACKEND_AUTOLOAD='0'"),
])
def test_the_launcher_refuses_a_setting_that_keeps_the_emulator_off(
        setting: dict[str, str], named: str) -> None:
    # stand-ins without a running emulator would send the hosts into Gaudi branches
    out = _launched("print('ran')", scrubbed(**setting))
    assert out.returncode == 2 and "ran" not in out.stdout
    assert named in out.stderr and "unset it" in out.stderr


def test_emulation_switched_off_by_zero() -> None:
    probe = "import torch\n" + PROBE
    out = run_python(probe, scrubbed(HPU_PLUGIN_EMULATE="0"), timeout=300, check=True)
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
