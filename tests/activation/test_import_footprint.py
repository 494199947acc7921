"""What ``import torch`` loads of the plugin: on a machine without Gaudi, the package root only
(its ``autoload`` answers that case; every further module is about 0.2 ms on every
``import torch``); otherwise the root hands over to ``activation``, and with emulation the
entry point starts everything, the emulator's stand-ins on ``sys.path`` included."""

from __future__ import annotations

import json

import pytest
from processes import emulated, run_python, scrubbed

PROBE = """
import json, sys
import torch
modules = sorted(m for m in sys.modules if m.split(".")[0] in ("hpu_plugin", "hpu_emulator"))
from hpu_plugin import state
from hpu_plugin.patching import this_process
print(json.dumps({
    "modules": modules, "status": state["status"], "reason": state["reason"],
    "exported": this_process.environment.made, "search_path": this_process.search_path.made,
    "hpu": hasattr(torch, "hpu") and torch.hpu.is_available(),
}))
"""


def _probe(env: dict[str, str]) -> dict[str, object]:
    out = run_python(PROBE, env, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_without_gaudi_import_torch_loads_only_the_package_root() -> None:
    result = _probe(scrubbed())
    assert result["modules"] == ["hpu_plugin"]
    # The entry point did run (it is what loaded the package), and said why it is off.
    assert (result["status"], result["reason"]) == (
        "skipped", "no Gaudi software and no emulation requested")
    assert result["hpu"] is False
    assert (result["exported"], result["search_path"]) == ([], [])


@pytest.mark.parametrize("value", ["0", "off"])
def test_emulation_switched_off_takes_the_parsed_path_to_the_same_answer(value: str) -> None:
    result = _probe(scrubbed(HPU_PLUGIN_EMULATE=value))
    assert "hpu_plugin.activation" in result["modules"]  # type: ignore[operator]
    assert (result["status"], result["reason"]) == (
        "skipped", "no Gaudi software and no emulation requested")
    assert result["hpu"] is False


def test_with_emulation_the_entry_point_starts_the_emulator_and_the_hosts() -> None:
    result = _probe(emulated())
    assert (result["status"], result["reason"]) == ("active", "emulated Gaudi")
    assert result["hpu"] is True
    # What it changed in the process is recorded in the Patches that take it back.
    assert result["exported"] == [
        "os.environ['PT_ENABLE_INT64_SUPPORT']", "os.environ['PT_HPU_LAZY_MODE']"]
    # the stand-ins: on sys.path here, and on PYTHONPATH for child processes
    assert len(result["search_path"]) == 2  # type: ignore[arg-type]
    assert "standins" in result["search_path"][0]  # type: ignore[index]
    assert "PYTHONPATH" in result["search_path"][1]  # type: ignore[index]
    modules = set(result["modules"])  # type: ignore[arg-type]
    assert {"hpu_plugin.emulator", "hpu_emulator", "hpu_plugin.hosts",
            "hpu_plugin.registry"} <= modules


def test_with_gaudi_software_found_the_full_path_runs(tmp_path) -> None:
    """A ``habana_frameworks`` outside the emulator's stand-ins reads as the real stack (this
    one registers no device): the common-case answer must not be taken, activation reads the
    switches, builds the registry and installs the hosts, then finds no device ready."""
    fake = tmp_path / "site" / "habana_frameworks"
    (fake / "torch").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "torch" / "__init__.py").write_text("")
    result = _probe(scrubbed(PYTHONPATH=str(tmp_path / "site")))
    assert (result["status"], result["reason"]) == (
        "skipped", "Gaudi software present, but no device is ready")
    assert {"hpu_plugin.registry", "hpu_plugin.hosts"} <= set(result["modules"])  # type: ignore[arg-type]
    assert "hpu_emulator" not in result["modules"]  # type: ignore[operator]
