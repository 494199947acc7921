"""``accelerate env`` from the registry."""

from __future__ import annotations

import os
import sys

from hpu_plugin import hosts
from hpu_plugin.hookspecs import DeviceProperties
from hpu_plugin.patching import this_process


def test_accelerate_env_lists_the_gaudi_devices(installed, answers, capsys, tmp_path, monkeypatch):
    from accelerate.commands import env

    # Accelerate 1.5 runs `which accelerate`: the venv's scripts must be on PATH
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])

    answers.properties = DeviceProperties("hpu", 2, 0, "GAUDI3")
    config = tmp_path / "none.yaml"
    config.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\n")
    info = env.env_command(env.env_command_parser().parse_args(["--config_file", str(config)]))
    out = capsys.readouterr().out
    if "PyTorch accelerator" in out:  # Accelerate >= 1.10 prints one
        assert "- PyTorch accelerator: HPU" in out
    assert "- HPU type: GAUDI3" in out
    assert "- HPU count: 2" in out
    if info is not None:
        assert info["HPU type"] == "GAUDI3"
    # the module's print is a recorded patch: the builtin's behaviour outside the command,
    # and gone once the adapters are undone
    assert "accelerate.commands.env.print" in this_process.hosts.made
    env.print("- `Accelerate` version: outside the command")
    assert "HPU" not in capsys.readouterr().out
    hosts.uninstall()
    assert "print" not in vars(env)
