"""Fixtures for tests that install plugin distributions and run programs in subprocesses.

The example distributions in ``entry_points/`` are installed with pip into the test
environment (``sys.executable``'s), with their metadata, as a user would; they are
uninstalled after the last test of this package, before any other package's tests run,
since an installed plugin changes decisions in every later subprocess.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import distributions
import processes
import pytest
from distributions import pip_installed
from processes import scrubbed

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = {
    "hpu-plugin-compile-policy": "compile-policy",
    "hpu-plugin-rank-placement": "rank-placement",
}
#: ``python -c`` puts its working directory first on sys.path: run where no module lives.
NEUTRAL_CWD = Path(sys.executable).parent


def clean_environ(**extra: str) -> dict[str, str]:
    """The test's environment without any of our switches, plus ``extra``."""
    return scrubbed("HPU_COMPILE_POLICY", "HPU_RANK_PLACEMENT", **extra)


def run_python(script: str, environ: dict[str, str], timeout: float = 300,
               args: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return processes.run_python(script, environ, timeout, NEUTRAL_CWD, args)


@pytest.fixture(scope="package")
def installed_examples(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Install both example distributions with pip; uninstall them afterwards.

    Copied first, so the build leaves nothing in the source tree; installed with
    ``--no-deps --no-build-isolation --no-index`` so it needs no network. A previous run
    that died before its teardown left them installed: uninstalled first.
    """
    build = tmp_path_factory.mktemp("examples")
    with pip_installed({dist: ROOT / "entry_points" / dist for dist in EXAMPLES}, build):
        yield dict(EXAMPLES)


def write_plugin(root: Path, name: str, source: str, *, dist: str, version: str) -> None:
    """A third-party plugin as installed, in ``root`` (which goes on the subprocess's
    PYTHONPATH)."""
    distributions.write_plugin(
        root, name.replace("-", "_"), source, dist=dist, version=version, name=name
    )
