"""``hpu-plugin`` on the emulator (``HPU_PLUGIN_EMULATE``), in subprocesses: what it shows
comes from the emulated ``torch.hpu`` and the emulator's ``hl-smi``. The ``emulator``
fixture fails first, with the reason, when the emulator cannot start."""

from __future__ import annotations

import json
import subprocess

import pytest
from processes import emulated, run_cli

pytestmark = pytest.mark.e2e


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, env=env)


@pytest.fixture(scope="module")
def emulator() -> None:
    info = run("info", "--json", env=emulated())
    assert json.loads(info.stdout)["available"], info.stdout + info.stderr


def test_info(emulator):
    info = json.loads(run("info", "--json", env=emulated()).stdout)
    assert info["activation"]["status"] == "active"
    assert info["versions"]["gaudi_software"] == "emulated"
    assert info["mode"].startswith("eager (PT_HPU_LAZY_MODE=0")
    decisions = info["decisions"]
    assert decisions["hpu_device_available"] == "True"
    assert "generation='GAUDI2'" in decisions["hpu_device_properties"]
    assert decisions["hpu_compile_backend('inductor')"] == "'hpu_backend'"
    assert decisions["hpu_ddp_backend(None)"] == "'hccl'"
    text = run("info", env=emulated()).stdout
    assert "Gaudi available: yes" in text and "Decisions now:" in text


def test_info_in_lazy_mode_shows_the_compile_refusal(emulator):
    info = json.loads(run("info", "--json", env=emulated(PT_HPU_LAZY_MODE="1")).stdout)
    assert info["mode"] == "lazy (PT_HPU_LAZY_MODE=1, set by the user)"
    assert info["decisions"]["hpu_compile_backend(None)"].startswith(
        "refused: PT_HPU_LAZY_MODE='1': torch.compile does not work"
    )


@pytest.mark.parametrize(
    ("extra", "modules", "generation", "visible"),
    [
        ({}, list(range(8)), "GAUDI2", list(range(8))),
        (
            {"HPU_PLUGIN_EMULATE": "gaudi3", "HABANA_VISIBLE_MODULES": "4,5"},
            list(range(8)),
            "GAUDI3",
            [4, 5],
        ),
    ],
)
def test_devices(emulator, extra, modules, generation, visible):
    result = json.loads(run("devices", "--json", env=emulated(**extra)).stdout)
    assert result["source"] == "hl-smi"
    assert [d["module_id"] for d in result["devices"]] == modules
    assert {d["generation"] for d in result["devices"]} == {generation}
    assert [d["module_id"] for d in result["devices"] if d["visible"]] == visible
    assert result["group"]["valid"] is True


@pytest.mark.parametrize(
    ("extra", "args", "code", "expected"),
    [
        ({"HABANA_VISIBLE_MODULES": "0,1"}, (), 0, "supported group of 2"),
        ({"HABANA_VISIBLE_MODULES": "0,2"}, (), 1, "0,1 | 2,3 | 4,5 | 6,7"),
        ({"HABANA_VISIBLE_MODULES": "0,1,2"}, (), 1, "a group of 3 devices"),
        ({"PT_HPU_LAZY_MODE": "1"}, ("--compile",), 1, "torch.compile does not work"),
        ({"HPU_PLUGIN_EMULATE": "gaudi"}, ("--dtype", "fp16"), 1, "first-generation Gaudi"),
        ({"HPU_PLUGIN_EMULATE": "gaudi"}, ("--bnb", "4"), 1, "bitsandbytes does not run"),
        ({}, ("--bnb", "4"), 0, "4-bit NF4"),
        ({}, (), 0, "emulated Gaudi software 1.19.0"),
    ],
)
def test_doctor(emulator, extra, args, code, expected):
    done = run("doctor", *args, env=emulated(**extra))
    assert done.returncode == code, done.stdout + done.stderr
    assert expected in done.stdout
