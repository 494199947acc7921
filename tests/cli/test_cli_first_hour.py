"""What a new user sees first: no ``ok`` for a device that is not there, one error said once,
and a non-zero exit when activation failed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from processes import emulated, no_hlsmi_path, run_cli, run_python, scrubbed


def no_gaudi() -> dict[str, str]:
    return scrubbed(PATH=no_hlsmi_path())


def test_no_gaudi_reports_no_mode_and_no_ok():
    info = run_cli("info", env=no_gaudi())
    assert info.returncode == 0, info.stderr
    assert "set by hpu-plugin" not in info.stdout
    assert "Mode: none" in info.stdout
    doctor = run_cli("doctor", env=no_gaudi())
    assert doctor.returncode == 0, doctor.stderr
    assert "[   ok]" not in doctor.stdout, doctor.stdout
    findings = json.loads(run_cli("doctor", "--json", env=no_gaudi()).stdout)["findings"]
    assert [f["severity"] for f in findings] == ["info"]


def test_wrapper_and_implementation_of_one_plugin_named_once():
    info = run_cli("info", env=no_gaudi()).stdout
    line = next(x for x in info.splitlines() if x.strip().startswith("hpu_quantization"))
    assert line.split()[1:] == ["quantization", "(wrapper,", "plain)"], line


@pytest.mark.e2e
def test_module_not_on_host_is_one_error_said_once():
    done = run_cli("doctor", env=emulated(HABANA_VISIBLE_MODULES="0,9"))
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert sum("[ERROR]" in line for line in lines) == 1, done.stdout
    assert "module id(s) 9 not on this host" in done.stdout
    assert not [line for line in lines if "[   ok]" in line or "[ WARN]" in line], done.stdout
    assert "install the Gaudi driver tools" not in done.stdout
    assert "module id(s) 9" not in done.stderr, done.stderr


@pytest.mark.e2e
def test_failed_activation_fails_info():
    done = run_cli("info", env=emulated(HPU_PLUGIN_EMULATE="gaudi4"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Activation: failed" in done.stdout
    assert "'gaudi4' names no Gaudi generation" in done.stdout
    assert "names no Gaudi generation" not in done.stderr, done.stderr


@pytest.mark.parametrize("command", ["info", "plugins", "doctor"])
def test_a_closed_stdout_ends_the_command_quietly(command):
    """``hpu-plugin info | head -1``: the reader left, so the command stops with no
    traceback and exits 141 (128 + SIGPIPE, as a shell reports it)."""
    child = subprocess.Popen(
        [sys.executable, "-m", "hpu_plugin", command], env=no_gaudi(),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    child.stdout.close()  # the reader is gone before the first line is written
    try:
        stderr = child.stderr.read().decode(errors="replace")
        code = child.wait(timeout=120)
    finally:
        child.kill()
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert code == 141, stderr


def test_a_hook_with_two_functions_in_one_plugin_is_listed_once():
    """The quantization plugin wraps its own implementation: two functions, one hook."""
    text = run_cli("plugins", env=no_gaudi())
    assert text.returncode == 0, text.stderr
    hooks = [line.split(":", 1)[1].split(",") for line in text.stdout.splitlines()
             if line.strip().startswith("hooks:")]
    assert hooks and all(len(h) == len(set(h)) for h in hooks), text.stdout
    listed = json.loads(run_cli("plugins", "--json", env=no_gaudi()).stdout)["plugins"]
    quantization = next(p for p in listed if p["name"] == "quantization")
    assert quantization["hooks"] == ["hpu_quantization_device_map"]


@pytest.mark.parametrize("extra", [
    {"HPU_PLUGIN_EMULATE": "gaudi4"},  # activation fails before it sets anything
    {"HPU_PLUGIN_EMULATE": "1", "HPU_PLUGIN_DISABLE": "1"},  # activation skipped
])
def test_mode_is_not_credited_to_a_plugin_that_set_nothing(extra):
    """The plugin exported no ``PT_HPU_LAZY_MODE``: the mode shown is what the Gaudi
    software reads from the real environment, and says so."""
    info = run_cli("info", env=scrubbed(PATH=no_hlsmi_path(), **extra))
    mode = next(line for line in info.stdout.splitlines() if line.startswith("Mode:"))
    assert "set by hpu-plugin" not in mode, mode
    assert mode.startswith("Mode: lazy (PT_HPU_LAZY_MODE unset: the Gaudi software's default"), mode
    user = run_cli("info", env=scrubbed(PATH=no_hlsmi_path(), PT_HPU_LAZY_MODE="0", **extra))
    assert "Mode: eager (PT_HPU_LAZY_MODE=0, set by the user)" in user.stdout, user.stdout


@pytest.mark.e2e
@pytest.mark.parametrize("command", ["info", "doctor"])
def test_what_host_imports_print_is_not_the_commands_output(command):
    """The adapters' probe imports Transformers' trainer, which reaches peft, bitsandbytes
    and torchao: bitsandbytes warns that its CPU 4-bit kernel is missing where the CPU has
    AVX-512 BF16, torchao that its CUDA libraries cannot load. Those lines are theirs:
    emulated info and doctor do not print them, and the report keeps them."""
    bitsandbytes = pytest.importorskip("bitsandbytes")
    done = run_cli(command, env=emulated())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "gemm_4bit_forward" not in done.stderr + done.stdout, done.stderr
    if command == "info":
        report = json.loads(run_cli("info", "--json", env=emulated()).stdout)
        printed = report["support"]["adapters"]["printed_by_hosts"]
        if bitsandbytes.functional.has_avx512bf16():
            assert "gemm_4bit_forward" in printed, printed
        lines = [line for line in printed.splitlines() if line.strip()]
        assert not [line for line in lines if line in done.stdout + done.stderr], done.stderr


@pytest.mark.e2e
def test_what_hosts_log_after_the_probe_is_shown():
    """Transformers makes its log handler at its first import, which the probe holds: the
    handler writes to stderr again afterwards."""
    done = run_python("""
        import torch
        from hpu_plugin.diagnostics import host_releases
        host_releases.probe_adapters()
        from transformers.utils import logging
        logging.get_logger("transformers").warning("logged after the probe")
    """, emulated())
    assert "logged after the probe" in done.stderr, done.stdout + done.stderr
