"""The pinned host releases' source distributions: fetched with pip, unpacked into a cache.

The versions are the pins of requirements/test.txt (the newest supported hosts); the
installed host must be that version, or the tests would test one release's code with
another's tests. Nothing is written inside the repository.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PINS_FILE = REPO / "requirements" / "test.txt"


class PeerSetupError(RuntimeError):
    """A precondition of the peer run is not met; the message names the fix."""


def cache_root() -> Path:
    """``HPU_PLUGIN_PEER_CACHE``, else ``$XDG_CACHE_HOME/hpu_plugin/peer`` (outside the repo)."""
    explicit = os.environ.get("HPU_PLUGIN_PEER_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hpu_plugin" / "peer"


def pinned_version(distribution: str) -> str:
    """The ``name==version`` pin of requirements/test.txt; the installed release must match."""
    pattern = re.compile(rf"^{re.escape(distribution)}==([^\s#]+)", re.IGNORECASE | re.MULTILINE)
    found = pattern.search(PINS_FILE.read_text(encoding="utf-8"))
    if not found:
        raise PeerSetupError(f"{PINS_FILE} has no '{distribution}==<version>' pin")
    version = found.group(1)
    try:
        installed = metadata.version(distribution)
    except metadata.PackageNotFoundError:
        installed = None
    if installed != version:
        raise PeerSetupError(
            f"{distribution} {installed or 'is not installed'}; the peer suites test the pinned "
            f"{version}: pip install -r requirements/peer.txt"
        )
    return version


def source_tree(distribution: str, version: str) -> Path:
    """The unpacked sdist of ``distribution==version`` (downloaded on first use)."""
    root = cache_root()
    tree = root / "src" / f"{distribution}-{version}"
    if (tree / "tests").is_dir():
        return tree
    downloads = root / "sdist"
    downloads.mkdir(parents=True, exist_ok=True)
    archive = downloads / f"{distribution}-{version}.tar.gz"
    if not archive.exists():
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--dest",
            str(downloads),
            f"{distribution}=={version}",
        ]
        print(f"peer_suites: downloading the {distribution} {version} source distribution")
        subprocess.run(command, check=True)
    if not archive.exists():
        raise PeerSetupError(f"pip did not leave {archive}; is {distribution} {version} an sdist?")
    (root / "src").mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as bundle:
        bundle.extractall(root / "src", filter="data")
    if not (tree / "tests").is_dir():
        raise PeerSetupError(f"{archive.name} has no tests/ folder")
    marker = tree / "tests" / "__init__.py"
    if distribution == "peft" and not marker.exists():
        # PEFT's test modules import each other relatively (`from .testing_utils import`),
        # as in its repository, whose tests/ is a package; the sdist leaves out the marker.
        marker.write_text("", encoding="utf-8")
    return tree
