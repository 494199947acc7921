"""The ``hl-smi`` shim runs no shell on the interpreter's path; hl-smi output that is not
UTF-8, a hung hl-smi and a bad ``HPU_PLUGIN_HLSMI_TIMEOUT`` end in a report, not a
traceback or a hang."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hpu_emulator.fake_hlsmi import shim_text
from hpu_plugin import machine

from .conftest import environ, run

HOSTILE_DIRS = {
    "command substitution": "$(touch pwned)",
    "backticks": "`touch pwned`",
    "double quote": 'a"b$(touch pwned)',
    "single quote": "it's $(touch pwned)",
    "spaces and substitution": "my dir $(touch pwned)",
    "semicolon": "x; touch pwned",
}


def _write_shim(directory: Path, executable: str) -> Path:
    shim = directory / "hl-smi"
    shim.write_text(shim_text(executable))
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return shim


@pytest.mark.parametrize("hostile", list(HOSTILE_DIRS))
def test_an_interpreter_path_is_never_run_as_a_command(tmp_path, hostile):
    """The interpreter is reached through a directory whose name is shell syntax; the shim
    runs it as a path: the command in the name never runs, and hl-smi answers."""
    where = tmp_path / HOSTILE_DIRS[hostile]
    where.mkdir()
    (where / "venv").symlink_to(sys.prefix)  # the test venv, reached through that name
    python = where / "venv" / "bin" / Path(sys.executable).name
    shim = _write_shim(tmp_path, str(python))
    done = subprocess.run([str(shim), "-Q", "index,module_id", "-f", "csv"], cwd=tmp_path,
                          env=environ(HPU_PLUGIN_EMULATE="1"), capture_output=True, text=True,
                          timeout=60)
    assert not (tmp_path / "pwned").exists() and not (where / "pwned").exists()
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "index, module_id"


def _fake_hlsmi(tmp_path: Path, body: bytes) -> str:
    tool = tmp_path / "fake-hl-smi"
    tool.write_bytes(b"#!/bin/sh\n" + body)
    tool.chmod(0o755)
    return str(tool)


@pytest.mark.parametrize("output", [
    b"printf 'index, module_id\\n0, \\377\\376\\n'", b"printf '\\377\\377\\377'",
    b"printf 'index, module_id\\n' ; printf '\\377' >&2 ; exit 3",
])
def test_output_that_is_not_utf8_is_unknown_not_a_crash(tmp_path, output):
    tool = _fake_hlsmi(tmp_path, output + b"\n")
    answer = machine.query(executable=tool, timeout=30)
    assert (answer.rows is None and answer.reason) or "\ufffd" in str(answer.rows)
    assert machine.index_module_map(executable=tool, timeout=30) is None


def test_a_hung_hlsmi_is_a_timeout_not_a_hang(tmp_path):
    answer = machine.query(executable=_fake_hlsmi(tmp_path, b"sleep 600\n"), timeout=0.5)
    assert answer.rows is None and answer.timed_out and "did not answer" in answer.reason


@pytest.mark.parametrize("command", ["doctor", "devices"])
def test_a_bad_hlsmi_timeout_is_a_finding_not_a_traceback(command):
    done = run(f"from hpu_plugin.cli import main; import sys; sys.exit(main([{command!r}]))",
               environ(HPU_PLUGIN_HLSMI_TIMEOUT="abc", HPU_PLUGIN_EMULATE="1"))
    assert "Traceback" not in done.stderr, done.stderr
    assert "HPU_PLUGIN_HLSMI_TIMEOUT='abc'" in done.stdout
    if command == "doctor":
        assert done.returncode != 0 and "fix:" in done.stdout
