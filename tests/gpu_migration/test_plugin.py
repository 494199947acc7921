"""The plugin honours the toolkit: its DDP decision agrees with it, ``info`` and ``doctor``
say whether it is on, the selftest checks it, and the plugin can be turned off."""

from __future__ import annotations

import json

import pytest
from processes import run_cli

from hpu_plugin.gaudi import migration

from .conftest import emulated_env, migrated_env

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("emulator")]


def _json(tmp_path, *args: str, **env: str) -> dict:
    done = run_cli(*args, "--json", env=migrated_env(tmp_path, **env))
    return json.loads(done.stdout)


def test_info_says_the_toolkit_is_loaded_and_nccl_runs_as_hccl(tmp_path):
    # first-party plugins only: the e2e tests' own third-party plugin is installed for the session
    info = _json(tmp_path, "info", HPU_PLUGIN_NO_THIRD_PARTY="1")
    assert info["gpu_migration"] == "loaded"
    assert info["decisions"]["hpu_ddp_backend('nccl')"] == "'hccl'"
    assert "torch.cuda.is_available" in info["patched"]["gpu_migration"]
    assert info["hooks"]["hpu_ddp_backend"] == ["gpu_migration", "ddp"]


@pytest.mark.migration_full
def test_turned_off_the_plugin_refuses_nccl_and_doctor_says_why(tmp_path):
    info = _json(tmp_path, "info", HPU_PLUGIN_DISABLE="gpu_migration")
    refused = info["decisions"]["hpu_ddp_backend('nccl')"]
    assert refused.startswith("refused: backend 'nccl' is for NVIDIA GPUs"), refused
    assert "PT_HPU_GPU_MIGRATION=1 and the gpu_migration plugin enabled" in refused
    done = run_cli("doctor", "--json", env=migrated_env(tmp_path,
                                                        HPU_PLUGIN_DISABLE="gpu_migration"))
    findings = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "gpu migration"]
    assert [f["severity"] for f in findings] == ["warning"], findings
    assert "gpu_migration plugin is not enabled" in findings[0]["message"]


@pytest.mark.migration_full
def test_doctor_and_info_without_the_toolkit(tmp_path):
    done = run_cli("info", env=emulated_env(tmp_path))
    assert "GPU Migration Toolkit (PT_HPU_GPU_MIGRATION): off" in done.stdout


@pytest.mark.migration_full
def test_the_selftest_runs_a_cuda_written_check_when_it_is_on(tmp_path):
    report = tmp_path / "selftest.json"
    done = run_cli("selftest", "--only", "gpu-migration", "--report", str(report),
                   env=migrated_env(tmp_path))
    checks = json.loads(report.read_text())["checks"]
    assert [(c["name"], c["status"]) for c in checks] == [("gpu-migration", "pass")], done.stdout
    assert checks[0]["details"]["nccl_runs_as"] == "hccl"
    assert checks[0]["details"]["relative_error"] < 3e-2


@pytest.mark.parametrize("raw, on", [("1", True), ("true", True), ("TRUE", True), ("0", False),
                                     ("False", False), ("", False), (None, False)])
def test_the_variable_is_read_as_the_bridge_reads_its_flags(raw, on):
    environ = {} if raw is None else {migration.VARIABLE: raw}
    assert migration.requested(environ) is on


@pytest.mark.parametrize("raw", ["yes", "on", "t", " 1", "enabled"])
def test_a_value_the_bridge_stops_on_is_refused_at_import_torch(tmp_path, raw):
    """The bridge reads this flag with ``parse_env_bool`` (synapse_helpers/env_flags.cpp),
    which stops the process on anything but 1/true/0/false: refused before any work."""
    done = run_cli("info", "--json", env=emulated_env(tmp_path, PT_HPU_GPU_MIGRATION=raw))
    info = json.loads(done.stdout)
    assert info["activation"]["status"] == "failed", info["activation"]
    assert f"{migration.VARIABLE}={raw!r}" in info["activation"]["reason"]
    assert "accepts only 1, true, 0 or false" in info["activation"]["reason"]
    assert info["gpu_migration"] == "invalid"


def test_what_a_group_runs_on_under_the_toolkit():
    assert [migration.ddp_backend(b) for b in (None, "nccl", "gloo", "hccl")] == [
        "hccl", "hccl", None, None]
    assert migration.state({}) == "off"  # this test process never loads it
