"""``accelerate launch`` process count and ``accelerate env`` from the registry."""

from __future__ import annotations

import os
import sys

import pytest

from hpu_plugin import hosts
from hpu_plugin.hookspecs import DeviceProperties
from hpu_plugin.patching import this_process


@pytest.fixture
def launch_args(monkeypatch, tmp_path):
    from accelerate.commands import launch

    # A user's default accelerate config would decide the process count instead of us.
    monkeypatch.setattr(launch, "default_config_file", str(tmp_path / "no-default-config.yaml"))

    def parse(*argv: str):
        return launch.launch_command_parser().parse_args([*argv, "train.py"])

    return parse


def test_launch_without_num_processes_starts_one_per_device(installed, answers, launch_args):
    from accelerate.commands import launch

    answers.properties = DeviceProperties("hpu", 2, 0, "GAUDI2")
    args = launch_args()
    launch._validate_launch_command(args)
    assert args.num_processes == 2
    assert args.multi_gpu is True


def test_launch_count_follows_a_plugin(installed, answers, launch_args):
    from accelerate.commands import launch

    answers.properties = DeviceProperties("hpu", 1, 0, "GAUDI3")
    args = launch_args()
    launch._validate_launch_command(args)
    assert args.num_processes == 1
    assert not args.multi_gpu


def test_launch_keeps_the_users_num_processes(installed, answers, launch_args):
    from accelerate.commands import launch

    answers.properties = DeviceProperties("hpu", 8, 0, "GAUDI2")
    args = launch_args("--num_processes", "1")
    launch._validate_launch_command(args)
    assert args.num_processes == 1
    assert not args.multi_gpu


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
