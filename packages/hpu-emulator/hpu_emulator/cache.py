"""The emulator's build cache on disk: its lock, its manifest and its checks.

A cached build is a directory holding the compiled library and ``manifest.json`` (the
library's name, size and SHA-256). It appears only whole: it is built in a staging
directory beside it and renamed into place, manifest last written, so a process never sees
half of one. Before a library is mapped, :func:`check` compares it with its manifest and
reads its ELF headers: mapping a truncated library kills the process with SIGBUS and no
message, so damage must be found by reading, never by loading.

The lock (``<build>.lock``, ``flock``) is shared while a build is checked and mapped and
exclusive while one is written. Its holder writes who it is (pid, since when) into the lock
file, so a process that waits says whom it waits for; the wait is bounded by
``HPU_PLUGIN_BUILD_LOCK_TIMEOUT`` seconds and then ends with an error naming the holder.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import struct
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from hpu_emulator import trust
from hpu_emulator.errors import EmulationError
from hpu_plugin import settings

MANIFEST = "manifest.json"
ENV_LOCK_TIMEOUT = "HPU_PLUGIN_BUILD_LOCK_TIMEOUT"
#: A build takes about a minute on an idle machine and several on a loaded one; waiting
#: longer than this for another process's build means that process is stuck.
DEFAULT_LOCK_TIMEOUT = 900.0
#: How long a wait goes on before it is announced (a load's shared lock is brief).
_ANNOUNCE_AFTER = 1.0
_POLL = 0.1


def lock_path(directory: Path) -> Path:
    return directory.parent / f"{directory.name}.lock"


def lock_timeout() -> float:
    try:
        return settings.seconds(ENV_LOCK_TIMEOUT, os.environ.get(ENV_LOCK_TIMEOUT),
                                DEFAULT_LOCK_TIMEOUT)
    except settings.SettingError as exc:
        raise EmulationError(str(exc)) from None


@contextlib.contextmanager
def locked(path: Path, *, exclusive: bool) -> Iterator[None]:
    """Hold the cache lock at ``path``: waits a bounded time, saying for whom."""
    import fcntl

    timeout = lock_timeout()
    try:
        handle = open(trust.create(path, truncate=False, readable=True), "r+")
    except OSError as exc:
        if not exclusive:  # a read-only shared cache: nobody can be writing it from here
            yield
            return
        raise EmulationError(
            f"cannot open the emulator build lock {path} ({exc.strerror}); fix: set "
            "HPU_PLUGIN_CACHE_DIR to a writable directory"
        ) from None
    with handle:
        _acquire(handle, path, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, timeout)
        try:
            if exclusive:
                _write_holder(handle)
            yield
        finally:
            if exclusive:
                handle.seek(0)
                handle.truncate()
                handle.flush()
            fcntl.flock(handle, fcntl.LOCK_UN)


def _acquire(handle: IO[str], path: Path, mode: int, timeout: float) -> None:
    import fcntl

    start = time.monotonic()
    announced = False
    while True:
        try:
            fcntl.flock(handle, mode | fcntl.LOCK_NB)
            if announced:
                sys.stderr.write(f"hpu_plugin: got the emulator build lock {path}.\n")
            return
        except BlockingIOError:
            pass
        waited = time.monotonic() - start
        if waited >= timeout:
            raise EmulationError(
                f"the Gaudi emulator build lock {path} is still held by {_holder(path)} after "
                f"{waited:.0f} s; fix: wait for that build to finish and retry, end that "
                f"process if it is stuck, or raise {ENV_LOCK_TIMEOUT} (now {timeout:g} s)"
            )
        if not announced and waited >= _ANNOUNCE_AFTER:
            sys.stderr.write(
                f"hpu_plugin: waiting for the emulator build lock {path}, held by "
                f"{_holder(path)}; giving up after {timeout:g} s ({ENV_LOCK_TIMEOUT}).\n"
            )
            sys.stderr.flush()
            announced = True
        time.sleep(_POLL)


def _write_holder(handle: IO[str]) -> None:
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps({"pid": os.getpid(), "since": time.time()}))
    handle.flush()


def _holder(path: Path) -> str:
    """Who holds the lock, from what the holder wrote: ``pid N (building since T)``."""
    try:
        info = json.loads(path.read_text() or "{}")
        pid, since = int(info["pid"]), float(info["since"])
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (loading the build)"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since))
    return f"pid {pid} (building since {stamp}, {time.time() - since:.0f} s ago)"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check(directory: Path, library: str) -> str | None:
    """What is wrong with the build in ``directory``, or ``None`` when it may be mapped."""
    manifest_path = directory / MANIFEST
    path = directory / library
    try:
        manifest = json.loads(manifest_path.read_text())
        size, digest = int(manifest["size"]), str(manifest["sha256"])
    except FileNotFoundError:
        return "it has no manifest: an unfinished build"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"its manifest is unreadable ({exc!r})"
    try:
        actual = path.stat().st_size
    except OSError:
        return f"its library {library} is missing"
    if actual != size:
        return f"its library is {actual} bytes, the manifest says {size}: truncated or replaced"
    problem = elf_problem(path, actual)
    if problem:
        return problem
    if _sha256(path) != digest:
        return "its library's SHA-256 differs from the manifest's: damaged or replaced"
    return None


def elf_problem(path: Path, size: int) -> str | None:
    """Do the ELF headers of ``path`` describe a file of ``size`` bytes?"""
    try:
        with open(path, "rb") as handle:
            header = handle.read(64)
    except OSError as exc:
        return f"its library cannot be read ({exc.strerror})"
    if len(header) < 64 or header[:4] != b"\x7fELF" or header[4] != 2:
        return "its library is not a 64-bit ELF file"
    order = "<" if header[5] == 1 else ">"
    phoff, shoff = struct.unpack_from(order + "QQ", header, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", header, 0x36)
    if phoff + phentsize * phnum > size or shoff + shentsize * shnum > size:
        return "its library's ELF headers point past its end: truncated"
    return None


def staging_dir(directory: Path) -> Path:
    """A fresh directory beside ``directory`` to build into (this process's own)."""
    staging = directory.parent / f".{directory.name}.build-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    os.mkdir(staging, trust.DIRECTORY_MODE)
    return staging


def publish(staging: Path, directory: Path, library: str) -> None:
    """Write the manifest and rename ``staging`` to ``directory``, replacing a damaged one.

    Called with the exclusive lock held, so no process is reading ``directory``.
    """
    path = staging / library
    os.chmod(path, 0o755)  # whatever the umask: a library others can write is not loaded
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())
    manifest = {"library": library, "size": path.stat().st_size, "sha256": _sha256(path)}
    trust.write_text(staging / MANIFEST, json.dumps(manifest))
    if directory.exists():
        old = directory.parent / f".{directory.name}.old-{os.getpid()}"
        shutil.rmtree(old, ignore_errors=True)
        directory.rename(old)
        shutil.rmtree(old, ignore_errors=True)
    staging.rename(directory)
