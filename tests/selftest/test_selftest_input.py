"""``hpu-plugin selftest`` refuses input it cannot honour before any check runs: a time
limit that is no bound, a report path that would block. Run with no Gaudi and no emulation,
so a refusal that came too late would show as the "no Gaudi here" message instead."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from processes import no_hlsmi_path, run_cli, scrubbed


def no_gaudi() -> dict[str, str]:
    return scrubbed(PATH=no_hlsmi_path())


@pytest.mark.parametrize("limit", ["inf", "-inf", "nan", "0", "-5", "Infinity"])
def test_a_time_limit_that_is_no_bound_is_refused_naming_the_option(limit):
    done = run_cli("selftest", f"--time-limit={limit}", env=no_gaudi(), timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--time-limit" in done.stderr and "finite number of seconds above 0" in done.stderr
    assert "no Gaudi here" not in done.stdout + done.stderr, done.stdout


@pytest.mark.parametrize("reader", [False, True])
def test_a_report_path_that_is_a_named_pipe_is_refused_before_any_check(tmp_path, reader):
    """A FIFO with no reader would block the first write; with a reader the report is not a
    file to attach. Either way: refused at once, naming the path and the fix."""
    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    held = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK) if reader else None
    try:
        done = run_cli("selftest", "--report", str(fifo), env=no_gaudi(), timeout=60)
    finally:
        if held is not None:
            os.close(held)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"--report {fifo}: is a named pipe" in done.stderr, done.stderr
    assert "give a regular file path" in done.stderr
    assert "no Gaudi here" not in done.stdout + done.stderr, done.stdout


def test_a_regular_report_path_is_accepted(tmp_path):
    report = tmp_path / "report.json"
    done = run_cli("selftest", "--report", str(report), env=no_gaudi(), timeout=120)
    assert done.returncode == 2 and "no Gaudi here" in done.stdout, done.stdout + done.stderr
    assert "--report" not in done.stderr and report.is_file()


def test_the_documented_exit_0_is_what_selftest_returns():
    """A check that could not run does not fail the run (``gpu-migration`` with the
    migration toolkit off has nothing to check), so exit 0 must not be promised as "all
    passed": the README and ``--help`` say "every check that could run passed"."""
    from hpu_plugin.selftest import protocol
    from hpu_plugin.selftest.command import _exit_status
    from hpu_plugin.selftest.runner import Outcome

    outcomes = [Outcome("detect", protocol.PASS, 1.0, ""),
                Outcome("gpu-migration", protocol.CANNOT_RUN, 0.1, "PT_HPU_GPU_MIGRATION off")]
    assert _exit_status(outcomes, "") == 0
    promise = "every check that could run passed"
    readme = " ".join((Path(__file__).parents[2] / "README.md").read_text().split())
    assert "status 0: all passed" not in readme
    assert f"status 0: {promise}" in readme
    helped = run_cli("selftest", "--help", env=no_gaudi(), timeout=60)
    assert promise in " ".join(helped.stdout.split()), helped.stdout
