"""Test-by-test comparison of the CPU and hpu runs against the committed expectations.

Rules (docs/peer-suites.md): a test that passes on CPU must pass on hpu; a test that runs on
hpu (passed, failed or error) must pass. The only exceptions are entries of
expectations.json, each with the hpu outcome it expects, a reason and a source. An entry
whose test now behaves otherwise is reported too, so the file cannot go stale.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

EXPECTATIONS = Path(__file__).resolve().parent / "expectations.json"
RAN = {"passed", "failed", "error", "xpassed"}


@dataclass
class Summary:
    """Counts of one suite and the lines that explain each unexpected difference."""

    suite: str
    collected: int = 0
    ran_on_hpu: int = 0
    passed_cpu: int = 0
    passed_hpu: int = 0
    expected_different: int = 0
    unexpected: list[str] = field(default_factory=list)
    # Tests that failed on CPU and on hpu alike (a checkout's tests that need the Hub).
    failed_both: int = 0

    def row(self) -> str:
        """One line of the summary table."""
        return (
            f"{self.suite:<13} {self.collected:>9} {self.ran_on_hpu:>10} {self.passed_cpu:>10} "
            f"{self.passed_hpu:>10} {self.expected_different:>9} {len(self.unexpected):>10}"
        )


HEADER = (
    f"{'suite':<13} {'collected':>9} {'ran on hpu':>10} {'cpu passed':>10} "
    f"{'hpu passed':>10} {'expected':>9} {'unexpected':>10}"
)


def load_expectations(suite: str) -> dict[str, dict[str, str]]:
    """The suite's entries; each must carry the expected hpu outcome, a reason and a source."""
    data = json.loads(EXPECTATIONS.read_text(encoding="utf-8"))
    entries: dict[str, dict[str, str]] = data.get(suite, {})
    for test, entry in entries.items():
        missing = [key for key in ("hpu", "reason", "source") if not entry.get(key)]
        if missing:
            raise ValueError(f"{EXPECTATIONS.name}: {suite} {test} lacks {', '.join(missing)}")
    return entries


def _exception(message: str) -> str:
    """The exception a failure's message names first (``ValueError``, ``AssertionError``)."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    return first.split(":", 1)[0].strip()


def _verdict(
    cpu: str, hpu: str, entry: dict[str, str] | None, strict: bool = True,
    same_failure: bool = True,
) -> str | None:
    """Why this test's outcome is unexpected, or None when it is as expected."""
    if entry is not None:
        if hpu != entry["hpu"]:
            return f"expected {entry['hpu']} on hpu ({entry['reason']}), got {hpu}"
        return None
    if not strict and cpu in ("failed", "error") and hpu in ("failed", "error"):
        return None if same_failure else f"{hpu} on hpu, failed otherwise on cpu"
    if hpu in ("failed", "error"):
        return f"{hpu} on hpu (cpu: {cpu})"
    if cpu == "passed" and hpu != "passed":
        return f"passed on cpu, {hpu} on hpu"
    if hpu == "absent" and cpu != "absent":
        return "not collected on hpu"
    return None


def compare(
    suite: str,
    cpu: dict[str, dict[str, str]],
    hpu: dict[str, dict[str, str]],
    only_selected: set[str] | None = None,
    strict: bool = True,
) -> Summary:
    """Compare two runs of one suite.

    With ``only_selected`` (the test files of a full run), an entry of those files that did
    not run is reported; a subset run (a ``-k`` selection) leaves that check out. Not
    ``strict`` (a checkout's own tests, run offline; the model zoo): a test that fails on CPU
    as on hpu, with the same exception, is counted in ``failed_both``, not reported; every
    CPU pass must still pass on hpu.
    """
    entries = load_expectations(suite)
    summary = Summary(suite)
    for test in sorted(set(cpu) | set(hpu)):
        cpu_outcome = cpu.get(test, {}).get("outcome", "absent")
        hpu_outcome = hpu.get(test, {}).get("outcome", "absent")
        summary.collected += 1
        summary.ran_on_hpu += hpu_outcome in RAN
        summary.passed_cpu += cpu_outcome == "passed"
        summary.passed_hpu += hpu_outcome == "passed"
        entry = entries.get(test)
        summary.expected_different += entry is not None and entry["hpu"] == hpu_outcome
        summary.failed_both += {cpu_outcome, hpu_outcome} <= {"failed", "error"}
        same = _exception(cpu.get(test, {}).get("message", "")) == _exception(
            hpu.get(test, {}).get("message", ""))
        problem = _verdict(cpu_outcome, hpu_outcome, entry, strict, same)
        if problem:
            message = hpu.get(test, {}).get("message", "")
            summary.unexpected.append(
                f"{test}: {problem}" + (f"\n    {message}" if message else "")
            )
    ran = set(cpu) | set(hpu)
    for test in entries if only_selected is not None else ():
        if test not in ran and any(test.startswith(path) for path in only_selected):
            summary.unexpected.append(f"{test}: in {EXPECTATIONS.name} but did not run")
    return summary
