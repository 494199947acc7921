"""How a check's process tells the runner its result: one marked JSON line on stdout.

A check runs in its own process, so its result crosses a process boundary. The last line
starting with :data:`MARK` wins; a process that dies, hangs or prints no such line is judged
by the runner from its exit status and output instead (a crash must never look like a pass).
"""

from __future__ import annotations

import json
import sys
from typing import Any

MARK = "HPU-PLUGIN-SELFTEST-RESULT "
#: A check's own verdicts. The runner adds ``timeout`` and ``error`` (no verdict printed).
PASS, FAIL, CANNOT_RUN = "pass", "fail", "cannot-run"
VERDICTS = (PASS, FAIL, CANNOT_RUN)


def emit(status: str, reason: str, details: dict[str, Any] | None = None) -> None:
    """Print the verdict line and flush, so a later crash at exit cannot lose it."""
    if status not in VERDICTS:
        raise ValueError(f"unknown selftest verdict {status!r}; one of {VERDICTS}")
    line = json.dumps({"status": status, "reason": reason, "details": details or {}}, default=str)
    sys.stdout.write(f"\n{MARK}{line}\n")
    sys.stdout.flush()


def parse(stdout: str) -> dict[str, Any] | None:
    """The last verdict in ``stdout``, or ``None`` when there is none or it is unreadable."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARK):
            try:
                verdict = json.loads(line[len(MARK):])
            except ValueError:
                return None
            if isinstance(verdict, dict) and verdict.get("status") in VERDICTS:
                return verdict
            return None
    return None
