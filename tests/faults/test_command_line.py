"""The command line checks its inputs before the work, and cleans up when interrupted.

Bad input (a report path that cannot be written, a process count below 1, a precision no
rule knows) is refused at once, naming the input and the fix, with exit status 2 and no
traceback. Ctrl-C or SIGTERM to ``hpu-plugin selftest`` ends the running check and its
workers and exits 130 or 143; to the first emulator build, it ends ninja and every compiler
and removes the staging directory. A full disk during the build is named as such.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from processes import scrubbed


def _cli(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = scrubbed(HPU_PLUGIN_EMULATE="1", **extra)
    return subprocess.run([sys.executable, "-m", "hpu_plugin", *args], env=env,
                          capture_output=True, text=True, timeout=120)


REPORT_PATHS = {  # the path, and the words of the reason
    "missing folder": ("{tmp}/no/such/folder/report.json", "No such file or directory"),
    "a folder": ("{tmp}", "Is a directory"),
    "a file as folder": ("{tmp}/file.txt/report.json", "Not a directory"),
    "full device": ("/dev/full", "No space left on device"),
}


@pytest.mark.parametrize("case", sorted(REPORT_PATHS))
def test_selftest_refuses_a_report_path_before_any_check(tmp_path, case):
    (tmp_path / "file.txt").write_text("")
    path, reason = REPORT_PATHS[case]
    path = path.format(tmp=tmp_path)
    done = _cli("selftest", "--report", path)
    assert done.returncode == 2, done.stderr
    assert f"--report {path}: {reason}" in done.stderr and "writable folder" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""  # no check, no table ran


BAD_DOCTOR = {
    "processes -1": (["--processes", "-1"], "give 1 or more"),
    "processes 0": (["--processes", "0"], "give 1 or more"),
    "processes text": (["--processes", "two"], "give 1 or more"),
    "dtype int4": (["--dtype", "int4"], "accepted: bf16"),
    "dtype empty": (["--dtype", ""], "accepted: bf16"),
    "dtype fp4": (["--dtype", "fp4"], "accepted: bf16"),
}


@pytest.mark.parametrize("case", sorted(BAD_DOCTOR))
def test_doctor_refuses_a_job_it_cannot_check(case):
    args, words = BAD_DOCTOR[case]
    done = _cli("doctor", *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"argument {args[0]}" in done.stderr and words in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def _marked(marker: str) -> list[str]:
    """Processes that inherited ``marker`` in their environment."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if f"I24_MARKER={marker}".encode() in (proc / "environ").read_bytes():
                found.append(proc.name)
        except OSError:
            continue
    return found


def _default_interrupt() -> None:
    """Run in the child before exec: a shell's background job (``cmd &``) starts with SIGINT
    ignored, which the child would inherit, and Python keeps an ignored SIGINT ignored, so
    Ctrl-C would never reach the command under test. A user at a terminal has it default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for(predicate, limit: float) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def _commands(marker: str) -> list[str]:
    names = []
    for pid in _marked(marker):
        try:
            names.append(Path(f"/proc/{pid}/comm").read_text().strip())
        except OSError:
            continue
    return names


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_selftest_interrupted_stops_its_check_and_workers(tmp_path, sig):
    marker = uuid.uuid4().hex
    env = scrubbed(HPU_PLUGIN_EMULATE="1", I24_MARKER=marker, HF_HOME=str(tmp_path / "hf"),
                   HPU_PLUGIN_SELFTEST_FAULT="hang:detect")
    proc = subprocess.Popen([sys.executable, "-m", "hpu_plugin", "selftest", "--only", "detect"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_interrupt)
    try:  # the hanging check and the child it started are running
        assert _wait_for(lambda: len(_marked(marker)) >= 3, 180), _marked(marker)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err and "the running check was stopped" in err
    assert _wait_for(lambda: not _marked(marker), 10), _commands(marker)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_first_build_leaves_no_compiler_and_no_staging(tmp_path, sig):
    marker = uuid.uuid4().hex
    env = scrubbed(HPU_PLUGIN_CACHE_DIR=str(tmp_path / "cache"), I24_MARKER=marker)
    proc = subprocess.Popen([sys.executable, "-m", "hpu_emulator", "build"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_interrupt)
    try:  # the compiler proper is running
        assert _wait_for(lambda: "cc1plus" in _commands(marker), 120), _commands(marker)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    # Ctrl-C: exit 130 with one line; SIGTERM: cleaned up, then ended by that signal
    assert proc.returncode == (130 if sig == signal.SIGINT else -sig), err
    assert "Traceback" not in err
    assert _wait_for(lambda: not _marked(marker), 10), _commands(marker)
    root = tmp_path / "cache" / "emulator"
    left = [p.name for p in root.iterdir() if p.is_dir()] if root.exists() else []
    assert left == [], left  # no staging directory, no half build


def test_a_full_disk_during_the_build_names_the_space(tmp_path):
    """The compiler fails as it does on a full disk; the message names the space and where."""
    fake = tmp_path / "cxx"
    fake.write_text("#!/bin/sh\ncase \"$*\" in *--version*) exec c++ \"$@\";; esac\n"
                    "echo \"fatal error: error writing to /tmp/ccX.s: No space left on "
                    "device\" >&2\nexit 1\n")
    fake.chmod(0o755)
    env = scrubbed(HPU_PLUGIN_CACHE_DIR=str(tmp_path / "cache"), CXX=str(fake))
    done = subprocess.run([sys.executable, "-m", "hpu_emulator", "build"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "ran out of disk space" in done.stderr and str(tmp_path / "cache") in done.stderr
    assert "HPU_PLUGIN_CACHE_DIR" in done.stderr and "check the compiler" not in done.stderr


def _failing_compiler(path: Path, error: str, seconds: float = 0) -> Path:
    """A CXX that answers ``--version`` as the real one and fails every compile with
    ``error``, after ``seconds``."""
    path.write_text("#!/bin/sh\ncase \"$*\" in *--version*) exec c++ \"$@\";; esac\n"
                    f"sleep {seconds}\necho \"{error}\" >&2\nexit 1\n")
    path.chmod(0o755)
    return path


IMPORT_TORCH = [sys.executable, "-c", "import torch"]


def test_a_failed_build_is_not_retried_by_every_process(tmp_path):
    """The first process compiles and fails; the next with the same compiler says so at
    once; ``python -m hpu_emulator build`` retries, and so does another compiler."""
    cxx = _failing_compiler(tmp_path / "cxx", "emulator.cpp:1:1: error: boom")
    env = scrubbed(HPU_PLUGIN_EMULATE="1", HPU_PLUGIN_CACHE_DIR=str(tmp_path / "cache"),
                   CXX=str(cxx))
    first = subprocess.run(IMPORT_TORCH, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0 and "compiling the Gaudi emulator for" in first.stderr
    assert "boom" in first.stderr, first.stderr[-2000:]
    again = subprocess.run(IMPORT_TORCH, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "compiling the Gaudi emulator for" not in again.stderr
    assert "boom" in again.stderr and "that build failed at" in again.stderr
    assert "does not try it again" in again.stderr
    assert "`python -m hpu_emulator build` to retry" in again.stderr
    retried = subprocess.run([sys.executable, "-m", "hpu_emulator", "build"], env=env,
                             capture_output=True, text=True, timeout=300)
    assert retried.returncode == 1 and "compiling the Gaudi emulator for" in retried.stderr
    other = _failing_compiler(tmp_path / "cxx2", "emulator.cpp:1:1: error: other")
    switched = subprocess.run(IMPORT_TORCH, env={**env, "CXX": str(other)},
                              capture_output=True, text=True, timeout=300)
    assert "compiling the Gaudi emulator for" in switched.stderr and "other" in switched.stderr


def test_a_missing_python_header_names_the_python_headers(tmp_path):
    cxx = _failing_compiler(
        tmp_path / "cxx", "emulator.cpp:1:10: fatal error: Python.h: No such file or directory")
    env = scrubbed(HPU_PLUGIN_CACHE_DIR=str(tmp_path / "cache"), CXX=str(cxx))
    done = subprocess.run([sys.executable, "-m", "hpu_emulator", "build"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "Python.h is missing" in done.stderr
    assert "-dev" in done.stderr and "python3-devel" in done.stderr
    assert "torch headers" not in done.stderr


def test_a_long_build_says_it_is_still_going(tmp_path, monkeypatch, capsys):
    from hpu_emulator import build
    from hpu_emulator.errors import EmulationError

    monkeypatch.setenv("HPU_PLUGIN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", str(_failing_compiler(tmp_path / "cxx", "x: error: slow", 4)))
    monkeypatch.setattr(build, "PROGRESS_EVERY", 1.0)
    with pytest.raises(EmulationError, match="slow"):
        build.rebuild()
    err = capsys.readouterr().err
    assert "still compiling the Gaudi emulator (" in err, err
