"""The tested releases said in four places agree: the matrix files (what runs), the package
(``hpu_plugin/hosts/support.py``, what ``hpu-plugin info`` says), the README's supported
range, and the results the matrix last recorded (all passed, at those versions).

Not part of the matrix sessions (they run tests/hosts, tests/e2e and, on the gaudi- entries,
tests/emulation): the recorded results are what those sessions write, so checking them
there would be circular.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from hpu_plugin.hosts import support

ROOT = Path(__file__).resolve().parents[2]
MATRIX_DIR = ROOT / "requirements" / "matrix"
PIN = re.compile(r"^([A-Za-z0-9_.-]+)\s*(==|>=)\s*(\S+)")


def pins(path: Path) -> dict[str, str]:
    """``name -> specifier`` of a requirements file, following ``-r`` includes."""
    found: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r"):
            found.update(pins(path.parent / line[2:].strip()))
        elif (match := PIN.match(line)) is not None:
            found[match[1].lower()] = f"{match[2]}{match[3]}"
    return found


# -- the one home of the tested releases, against what runs and what is said -------------------


def test_matrix_files_are_the_matrix_entries():
    files = {path.stem: pins(path) for path in MATRIX_DIR.glob("*.txt")}
    assert sorted(files) == sorted(entry.name for entry in support.MATRIX)
    for entry in support.MATRIX:
        for host in support.HOSTS:
            assert files[entry.name][host] == f"=={entry.version(host)}", (entry.name, host)


def test_matrix_files_pin_the_same_tools_as_the_development_environment():
    development = pins(ROOT / "requirements" / "test.txt")
    for path in MATRIX_DIR.glob("*.txt"):
        for name, specifier in pins(path).items():
            if name not in support.HOSTS and name in development:
                assert specifier == development[name], (path.name, name)


def test_readme_states_exactly_the_tested_releases():
    readme = (ROOT / "README.md").read_text()
    paragraph = readme.split("**Supported range**", 1)[1].split("\n\n", 1)[0]
    stated = set(re.findall(r"\b\d+\.\d+(?:\.\d+)?\b", paragraph))
    tested = {v for host in support.HOSTS for v in support.tested_releases(host)}
    assert stated == tested


#: Entries CI does not run (docs/version-matrix.md says why): their record is the evidence.
OUTSIDE_CI: set[str] = {"gaudi-1.23", "gaudi-1.24.0", "gaudi-1.24.1"}


def test_ci_runs_every_entry_but_those_said_to_be_outside():
    step = (ROOT / ".ci" / "steps" / "30-matrix-hosts.sh").read_text().splitlines()
    commands = "\n".join(line for line in step if not line.lstrip().startswith("#"))
    sessions = re.search(r"^ENTRIES=\(((?:[\w.-]+ ?)+)\)$", commands, re.MULTILINE)
    assert sessions is not None
    in_ci = set(sessions[1].split()) | {"newest"}  # newest: the whole suite, step 20
    assert in_ci | OUTSIDE_CI == {entry.name for entry in support.MATRIX}
    assert not in_ci & OUTSIDE_CI


def test_recorded_results_are_at_the_matrix_versions_and_passed():
    """Every entry outside CI has a record; every record is of the entry's releases and
    passed (a record of another release, or of a failure, is not evidence)."""
    results = json.loads((ROOT / "docs" / "version-matrix-results.json").read_text())
    table = (ROOT / "docs" / "version-matrix.md").read_text()
    assert OUTSIDE_CI <= set(results)
    entries = {entry.name: entry for entry in support.MATRIX}
    for name, result in results.items():
        for host in support.HOSTS:
            assert support.release_key(result["versions"][host]) == support.release_key(
                entries[name].version(host)
            ), (name, host)
        assert result["counts"]["failures"] + result["counts"]["errors"] == 0, name
        assert result["counts"]["passed"] > 0, name
        assert f"| {name} | {result['date']} |" in table


def test_the_package_requires_the_oldest_tested_torch():
    import tomllib

    from hpu_plugin.hosts.support import release_key

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (torch,) = [d for d in project["dependencies"] if re.match(r"torch\b", d)]
    oldest = min((entry.torch for entry in support.MATRIX), key=lambda v: release_key(v) or ())
    assert torch == f"torch>={oldest}"  # no upper bound: pip would replace a newer torch
