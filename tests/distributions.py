"""Plugin distributions for tests: written to a folder, or pip-installed for real.

A written one is a module plus a ``*.dist-info`` (``METADATA`` and ``entry_points.txt``):
on ``sys.path`` or ``PYTHONPATH``, ``importlib.metadata`` finds it, with its distribution and
version, exactly as it finds an installed one. A pip-installed one goes through the real
build and install, for what only an installed distribution shows (console scripts,
``pip uninstall``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

from hpu_plugin.loader import ENTRY_POINT_GROUP

PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
#: ``--no-build-isolation`` builds with this environment's setuptools, which must build
#: wheels by itself: 70.1 and later do (older ones also need ``wheel``).
MIN_SETUPTOOLS = (70, 1)


def write_plugin(
    root: Path, module: str, source: str, *, dist: str, version: str, name: str | None = None,
    value: str | None = None,
) -> None:
    """Write ``module``'s source and add its entry point ``name = value`` (default: the
    module name, pointing at the module) to ``dist``'s dist-info in ``root``."""
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    entry_points = info / "entry_points.txt"
    text = entry_points.read_text() if entry_points.exists() else f"[{ENTRY_POINT_GROUP}]\n"
    entry_points.write_text(text + f"{name or module} = {value or module}\n")


def _require_setuptools() -> None:
    try:
        version = metadata.version("setuptools")
    except metadata.PackageNotFoundError:
        version = "none"
    release = tuple(int(part) for part in version.split(".")[:2] if part.isdigit())
    assert len(release) == 2 and release >= MIN_SETUPTOOLS, (
        f"the test plugins are built with this environment's setuptools ({version}); "
        f"install setuptools>={'.'.join(map(str, MIN_SETUPTOOLS))} (requirements/test.txt)"
    )


def _uninstall(dists: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PIP, "uninstall", "-y", *dists], capture_output=True, text=True, timeout=300
    )


@contextmanager
def pip_installed(sources: Mapping[str, Path], build: Path | None = None) -> Iterator[None]:
    """``pip install`` each distribution (name -> source folder) for the block's duration.

    With ``build``, copied there first, so the build leaves nothing in a source tree of the
    repository; installed with ``--no-deps --no-build-isolation --no-index``, so it needs no
    network. A previous run that died before uninstalling left them installed: uninstalled
    first. Shared by every test package that installs plugin distributions.
    """
    _require_setuptools()
    dists = list(sources)
    _uninstall(dists)
    paths = []
    for dist, source in sources.items():
        if build is None:
            paths.append(str(source))
            continue
        target = build / dist
        ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
        shutil.copytree(source, target, ignore=ignore)
        paths.append(str(target))
    done = subprocess.run(
        [*PIP, "install", "-q", "--no-deps", "--no-build-isolation", "--no-index", *paths],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    try:
        yield
    finally:
        removed = _uninstall(dists)
        assert removed.returncode == 0, removed.stdout + removed.stderr
