"""A pytest plugin that writes one outcome per test to a JSON file.

Loaded into the host suites' pytest runs with ``-p peer_suites.outcomes``; junit XML would
lose the pytest node id (which file, which parametrization) that the expectations file is
keyed on, and ``-rA`` output is truncated. The file is named by ``HPU_PLUGIN_PEER_OUTCOMES``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

_RESULTS: dict[str, dict[str, str]] = {}


def _message(report: pytest.TestReport) -> str:
    """The one line that says why a test failed or skipped (the full trace is in the log)."""
    longrepr: Any = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # skip: (file, line, reason)
        return str(longrepr[2])
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message).splitlines()[0][:300] if crash.message else ""
    return str(longrepr).strip().splitlines()[-1][:300] if longrepr else ""


def record(nodeid: str, outcome: str, message: str) -> None:
    """An outcome decided outside a test's own reports (another plugin's)."""
    _RESULTS[nodeid] = {"outcome": outcome, "message": message}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Record the call's outcome; a setup or teardown failure makes it an error."""
    entry = _RESULTS.setdefault(report.nodeid, {"outcome": "passed", "message": ""})
    if report.when == "call":
        if report.failed:
            entry.update(outcome="failed", message=_message(report))
        elif report.skipped:
            # An xfail that failed is reported as skipped with `wasxfail`.
            outcome = "xfailed" if hasattr(report, "wasxfail") else "skipped"
            entry.update(outcome=outcome, message=_message(report))
        elif hasattr(report, "wasxfail"):
            entry.update(outcome="xpassed", message="")
    elif report.skipped:  # a skip decided at setup (skipif / unittest.skipUnless)
        entry.update(outcome="skipped", message=_message(report))
    elif report.failed and entry["outcome"] != "failed":
        entry.update(outcome="error", message=f"{report.when}: {_message(report)}")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write the file once, at the end (a crashed run leaves no file: the runner says so)."""
    path = os.environ.get("HPU_PLUGIN_PEER_OUTCOMES")
    # A host test that re-runs itself in a pytest subprocess (Transformers'
    # @run_test_using_subprocess) inherits the plugin: only the runner's own child writes.
    if path and os.environ.get("HPU_PLUGIN_PEER_PARENT") == str(os.getppid()):
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(_RESULTS, handle, indent=1, sort_keys=True)
