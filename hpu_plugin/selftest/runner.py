"""Runs one check in its own process group with a time limit, and judges what came back.

Output goes to temporary files, not pipes: a grandchild that outlives a killed check could
hold a pipe open and hang the runner. On the limit, or when the runner itself is
interrupted (Ctrl-C, SIGTERM), the whole process group is ended (SIGTERM, then SIGKILL
after a grace period), so no worker of the check survives it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from hpu_plugin.selftest import protocol

GRACE = 5.0  # seconds between SIGTERM and SIGKILL
TAIL_LINES = 40
TIMEOUT, ERROR = "timeout", "error"  # verdicts only the runner gives


@dataclass
class Outcome:
    """One check's result as the table, ``--json`` and the report show it."""

    name: str
    status: str  # pass, fail, cannot-run, timeout, error
    seconds: float
    reason: str
    details: dict[str, Any] = field(default_factory=dict)
    modules: str = ""  # HABANA_VISIBLE_MODULES the check ran with ("" = not set by us)
    exit_code: int | None = None
    tail: str = ""

    @property
    def failed(self) -> bool:
        return self.status in (protocol.FAIL, TIMEOUT, ERROR)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _end_group(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, GRACE), (signal.SIGKILL, GRACE)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            # the leader is gone; end what is left of its group too
            os.killpg(proc.pid, signal.SIGKILL)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            continue
        return


def _tail(text: str) -> str:
    return "\n".join(text.splitlines()[-TAIL_LINES:])


def run_check(
    name: str, target: str, limit: float, env: dict[str, str], modules: str = ""
) -> Outcome:
    """``python -m target`` with ``env``; ended after ``limit`` seconds."""
    with tempfile.TemporaryFile() as out:
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", target], env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
        try:
            code: int | None = proc.wait(timeout=limit)
            timed_out = False
        except BaseException as exc:  # Ctrl-C or SIGTERM: the check and its workers go too
            if not isinstance(exc, subprocess.TimeoutExpired):
                _end_group(proc)
                raise

            _end_group(proc)
            code, timed_out = None, True
        else:
            _end_group(proc)  # workers a finished check left behind
        seconds = time.monotonic() - start
        out.seek(0)
        text = out.read().decode(errors="replace")
    tail = _tail(text)
    if timed_out:
        return Outcome(name, TIMEOUT, seconds, f"no result in {limit:g} s: ended (time limit)",
                       modules=modules, tail=tail)
    verdict = protocol.parse(text)
    if verdict is None:
        last = next((line for line in reversed(text.splitlines()) if line.strip()), "")
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit {code}"
        return Outcome(name, ERROR, seconds, f"no verdict ({how}): {last.strip()[:200]}",
                       modules=modules, exit_code=code, tail=tail)
    return Outcome(name, verdict["status"], seconds, verdict["reason"], verdict["details"],
                   modules, code, tail)
