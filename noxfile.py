"""The version matrix: one nox session per pinned file in ``requirements/matrix/``.

``nox -s oldest middle`` runs two entries; ``nox`` runs them all. Each session installs its
file and this package into ``.nox/<entry>``, builds the emulator's runtime for that torch,
runs the host adapters' tests and the end-to-end reference page (``tests/hosts``,
``tests/e2e``), on the ``gaudi-`` entries the emulation tests as well (``tests/emulation``:
training and inference graphs, fp8, MoE and several cards on the torch a Gaudi release
ships; extra arguments go to pytest), and records what it measured in
``docs/version-matrix-results.json`` and the results table of ``docs/version-matrix.md``:
the date, the installed versions, the test counts and the time of each phase. Commit those
two files after a run: they are the record of what the matrix last showed.

The entries' versions are also in ``hpu_plugin/hosts/support.py`` (``MATRIX``), which
``hpu-plugin info`` reads; ``tests/hosts/test_support.py`` keeps the two equal.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import nox

ROOT = Path(__file__).parent
MATRIX = ROOT / "requirements" / "matrix"
RESULTS = ROOT / "docs" / "version-matrix-results.json"
TABLE = ROOT / "docs" / "version-matrix.md"
TABLE_START = "<!-- results: written by noxfile.py -->"
TABLE_END = "<!-- end of results -->"
TESTS = ("tests/hosts", "tests/e2e")
GAUDI_TESTS = (*TESTS, "tests/emulation")
VERSIONS = (
    "import importlib.metadata as m, json, sys; print(json.dumps({'python': sys.version.split()[0],"
    " **{d: m.version(d) for d in ('torch', 'transformers', 'accelerate')}}))"
)

nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"  # a second run skips the multi-GB installs
nox.options.error_on_missing_interpreters = True


def _disk_mib(folder: Path) -> int:
    """Disk used by a folder (allocated blocks, as ``du`` counts them)."""
    total = 0
    for directory, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(directory, name)).st_blocks * 512
            except OSError:
                continue
    return total // 2**20


def _counts(junit: Path) -> dict[str, int]:
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    assert suite is not None, f"no testsuite in {junit}"
    counts = {key: int(suite.get(key, "0")) for key in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return counts


def _record(name: str, result: dict[str, object]) -> None:
    """Keep the newest result of each entry, and rewrite the table in the docs from them
    (under a lock: entries may run in parallel, ``nox -s a & nox -s b``)."""
    with open(ROOT / ".nox" / "results.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _write(name, result)


def _write(name: str, result: dict[str, object]) -> None:
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results[name] = result
    order = sorted(path.stem for path in MATRIX.glob("*.txt"))
    results = {key: results[key] for key in order if key in results}
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    rows = [
        "| entry | date (UTC) | torch | transformers | accelerate | passed | failed | skipped "
        "| install | build | tests | venv |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, r in results.items():
        c = r["counts"]
        fresh = "" if r["fresh_venv"] else " (reused)"
        rows.append(
            f"| {key} | {r['date']} | {r['versions']['torch']} | {r['versions']['transformers']} "
            f"| {r['versions']['accelerate']} | {c['passed']} | {c['failures'] + c['errors']} "
            f"| {c['skipped']} | {r['seconds']['install']} s{fresh} | {r['seconds']['build']} s "
            f"| {r['seconds']['tests']} s | {r['venv_mib']} MiB |"
        )
    text = TABLE.read_text()
    head, rest = text.split(TABLE_START, 1)
    _, tail = rest.split(TABLE_END, 1)
    TABLE.write_text(f"{head}{TABLE_START}\n" + "\n".join(rows) + f"\n{TABLE_END}{tail}")


def _run_entry(session: nox.Session, requirements: Path) -> None:
    venv = Path(session.virtualenv.location)
    fresh = not (venv / "pyvenv.cfg").exists() or not any(venv.glob("lib/*/site-packages/torch"))
    seconds: dict[str, int] = {}
    start = time.monotonic()
    session.install("-r", str(requirements), "-e", ".", "-e", "packages/hpu-emulator")
    seconds["install"] = round(time.monotonic() - start)
    start = time.monotonic()
    session.run("python", "-m", "hpu_emulator", "build")
    seconds["build"] = round(time.monotonic() - start)
    printed = session.run("python", "-c", VERSIONS, silent=True)
    if printed is None:  # `nox --install-only`: the environment is ready, nothing ran
        return
    versions = json.loads(printed.strip())
    junit = Path(session.create_tmp()) / "junit.xml"
    start = time.monotonic()
    # Exit code 1 (tests failed) is recorded like a pass; anything else (pytest could not
    # run) stops here.
    tests = GAUDI_TESTS if requirements.stem.startswith("gaudi-") else TESTS
    session.run("pytest", *tests, f"--junitxml={junit}", *session.posargs, success_codes=[0, 1])
    seconds["tests"] = round(time.monotonic() - start)
    counts = _counts(junit)
    _record(
        requirements.stem,
        {
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
            "versions": versions,
            "tests": " ".join([*tests, *session.posargs]),
            "counts": counts,
            "seconds": seconds,
            "fresh_venv": fresh,
            "venv_mib": _disk_mib(venv),
        },
    )
    failed = counts["failures"] + counts["errors"]
    if failed:
        session.error(f"{requirements.stem}: {failed} test(s) failed (recorded)")


def _define(requirements: Path) -> None:
    @nox.session(name=requirements.stem)
    def entry(session: nox.Session) -> None:
        _run_entry(session, requirements)

    entry.__doc__ = requirements.read_text().splitlines()[0].lstrip("# ")


for _requirements in sorted(MATRIX.glob("*.txt")):
    _define(_requirements)
