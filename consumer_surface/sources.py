"""The pinned consumers' released code: downloaded with pip into a cache, read in place.

Wheels where the release has one (they hold exactly what ``pip install`` puts on a user's
machine); an sdist otherwise (DeepSpeed publishes only that), of which only the package
directory is read. Nothing is installed, built or unpacked: the archive's ``.py`` members
are read as text. The cache lives outside the repository.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Consumer:
    """A released project written for Gaudi (or with a Gaudi path) by others."""

    distribution: str
    version: str
    #: The importable package(s) of an sdist: its other directories (tests, csrc, a
    #: second copy of op_builder) are not installed.
    packages: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.distribution}=={self.version}"


#: The releases the project claims to run (issue 20); a new pin here, then
#: ``python -m consumer_surface extract`` rewrites surface.json.
CONSUMERS = (
    Consumer("deepspeed", "0.19.8", ("deepspeed",)),
    Consumer("optimum-habana", "1.21.2"),
    Consumer("lightning-habana", "1.6.0"),
    Consumer("sentence-transformers", "6.2.0"),
    Consumer("diffusers", "0.42.1"),
    Consumer("bitsandbytes", "0.50.2"),
    Consumer("transformers", "4.51.3"),
    Consumer("transformers", "5.24.0"),
    Consumer("accelerate", "1.15.0"),
    # Intel Neural Compressor: its Gaudi fp8 quantization (measure, convert, patched
    # modules) is how Gaudi users run fp8; its wheel holds every framework's code.
    Consumer("neural-compressor", "3.10"),
)


def cache_root() -> Path:
    """``HPU_PLUGIN_SURFACE_CACHE``, else ``$XDG_CACHE_HOME/hpu_plugin/surface``."""
    explicit = os.environ.get("HPU_PLUGIN_SURFACE_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hpu_plugin" / "surface"


def _normalized(name: str) -> str:
    return name.replace("-", "_").lower()


def _cached(consumer: Consumer, folder: Path) -> Path | None:
    stem = _normalized(f"{consumer.distribution}-{consumer.version}")
    for path in sorted(folder.glob("*")):
        if _normalized(path.name).startswith(stem) and path.suffix in {".whl", ".gz"}:
            return path
    return None


def _pip_download(consumer: Consumer, folder: Path, binary: bool) -> None:
    """pip's own download; a release without a wheel fails quietly on the first try."""
    kind = ["--only-binary", ":all:"] if binary else ["--no-binary", ":all:"]
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *kind,
               "--dest", str(folder), consumer.key]
    # DeepSpeed's setup.py compiles nothing when told so; pip only reads its metadata.
    env = {**os.environ, "DS_BUILD_OPS": "0"}
    subprocess.run(command, check=True, env=env, capture_output=binary)


def archive(consumer: Consumer) -> Path:
    """The release's wheel (else sdist), downloaded on first use."""
    folder = cache_root() / "downloads"
    folder.mkdir(parents=True, exist_ok=True)
    found = _cached(consumer, folder)
    if found:
        return found
    print(f"consumer_surface: downloading {consumer.key}", file=sys.stderr)
    try:
        _pip_download(consumer, folder, binary=True)
    except subprocess.CalledProcessError:
        _pip_download(consumer, folder, binary=False)
    found = _cached(consumer, folder)
    if found is None:
        raise RuntimeError(f"pip left no archive of {consumer.key} in {folder}")
    return found


def _wanted(member: str, consumer: Consumer) -> bool:
    if not member.endswith(".py"):
        return False
    if not consumer.packages:
        return True
    parts = member.split("/")
    # An sdist's members start with "<name>-<version>/".
    return len(parts) > 2 and parts[1] in consumer.packages


def python_files(consumer: Consumer) -> Iterator[tuple[str, str]]:
    """(path inside the release, source text) of every Python file it installs."""
    path = archive(consumer)
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as wheel:
            for member in sorted(wheel.namelist()):
                if _wanted(member, consumer):
                    yield member, wheel.read(member).decode("utf-8", "replace")
        return
    with tarfile.open(path) as sdist:
        for member in sorted(sdist.getmembers(), key=lambda item: item.name):
            if member.isfile() and _wanted(member.name, consumer):
                handle = sdist.extractfile(member)
                if handle is not None:
                    text = handle.read().decode("utf-8", "replace")
                    yield member.name.split("/", 1)[1], text
