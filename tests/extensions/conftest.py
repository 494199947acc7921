"""Fixtures for tests that install plugin distributions and run programs in subprocesses.

The example distributions in ``entry_points/`` are installed with pip into the test
environment (``sys.executable``'s), with their metadata, as a user would; they are
uninstalled after the last test of this package, before any other package's tests run,
since an installed plugin changes decisions in every later subprocess.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = {
    "hpu-plugin-compile-policy": "compile-policy",
    "hpu-plugin-rank-placement": "rank-placement",
}
#: ``python -c`` puts its working directory first on sys.path: run where no module lives.
NEUTRAL_CWD = Path(sys.executable).parent
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]


def clean_environ(**extra: str) -> dict[str, str]:
    """The test's environment without any of our switches, plus ``extra``."""
    environ = {
        key: value for key, value in os.environ.items()
        if not key.startswith(("HPU_PLUGIN_", "HPU_COMPILE_POLICY", "HPU_RANK_PLACEMENT",
                               "PT_HPU_", "HABANA_", "LOCAL_RANK", "RANK", "WORLD_SIZE"))
    }
    environ.update(extra)
    return environ


def run_python(script: str, environ: dict[str, str], timeout: float = 300,
               args: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        env=environ, capture_output=True, text=True, timeout=timeout, cwd=NEUTRAL_CWD,
    )


def _uninstall(names: Iterable[str] = EXAMPLES) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PIP, "uninstall", "-y", *names], capture_output=True,
                          text=True, timeout=300)


@contextlib.contextmanager
def pip_installed(sources: dict[str, Path]) -> Iterator[None]:
    """Install the distributions in ``sources`` (name: source tree) with pip, as a user
    would, for the ``with`` block; uninstall them afterwards.

    Installed with ``--no-deps --no-build-isolation --no-index`` so it needs no network. A
    previous run that died before its teardown left them installed: uninstalled first.
    Shared by every test package that installs plugin distributions (extensions, faults).
    """
    _require_setuptools()
    _uninstall(sources)
    done = subprocess.run(
        [*PIP, "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
         *map(str, sources.values())],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    try:
        yield
    finally:
        removed = _uninstall(sources)
        assert removed.returncode == 0, removed.stdout + removed.stderr


def _require_setuptools() -> None:
    """``--no-build-isolation`` builds with the test environment's own setuptools, which
    must build wheels by itself (70.1 and later do; older ones also need ``wheel``)."""
    from importlib import metadata

    try:
        version = metadata.version("setuptools")
    except metadata.PackageNotFoundError:
        version = "none"
    major_minor = tuple(int(part) for part in version.split(".")[:2] if part.isdigit())
    assert len(major_minor) == 2 and major_minor >= (70, 1), (
        f"tests/extensions build the example plugins with this environment's setuptools "
        f"({version}); install setuptools>=70.1 (requirements/test.txt)"
    )


@pytest.fixture(scope="package")
def installed_examples(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Install both example distributions with pip; uninstall them afterwards.

    Copied first, so the build leaves nothing in the source tree (see :func:`pip_installed`).
    """
    build = tmp_path_factory.mktemp("examples")
    sources = {}
    for dist in EXAMPLES:
        sources[dist] = build / dist
        shutil.copytree(ROOT / "entry_points" / dist, sources[dist],
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    with pip_installed(sources):
        yield dict(EXAMPLES)


def write_plugin(root: Path, name: str, source: str, *, dist: str, version: str) -> None:
    """A third-party plugin as installed: its module and its dist-info, in ``root``.

    ``root`` goes on the subprocess's PYTHONPATH, where ``importlib.metadata`` finds the
    dist-info exactly as it finds one in site-packages.
    """
    module = name.replace("-", "_")
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[hpu_plugin]\n{name} = {module}\n")
