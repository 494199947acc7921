"""Build and load the emulator's C++ runtime, cached per torch version and source hash.

Loading a cached build imports nothing heavy (no ``torch.utils.cpp_extension``), because it
runs inside ``import torch``. A build takes about a minute and 2 GB of compiler memory, so
concurrent processes (``torchrun`` workers) wait on one file lock and share one build.

The cache is never half-written and never mapped unchecked (:mod:`.cache`): a build goes
into a temporary directory that is renamed into place with a manifest of the library's size
and hash; a load checks that manifest and the ELF headers first, so a truncated library is
rebuilt, not mapped (mapping one kills the process with SIGBUS); loading takes the lock
too, so it never reads a build in progress.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from hpu_emulator import cache, trust
from hpu_emulator.errors import EmulationError

CSRC = Path(__file__).parent / "csrc"
SOURCES = ("emulator.cpp",)
CFLAGS = ("-O2", "-DNDEBUG")
NAME = "hpu_plugin_emulator"
#: Part of the cache key: a cache written by an older layout (no manifest) is not read.
LAYOUT = "manifest-1"


def cache_root() -> Path:
    override = os.environ.get("HPU_PLUGIN_CACHE_DIR", "").strip()
    if override:
        return Path(override).expanduser() / "emulator"
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base).expanduser() / "hpu_plugin" / "emulator"


def source_hash() -> str:
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update(name.encode())
        digest.update((CSRC / name).read_bytes())
    digest.update(" ".join(CFLAGS).encode())
    digest.update(sys.implementation.cache_tag.encode())
    digest.update((sysconfig.get_config_var("EXT_SUFFIX") or "").encode())
    digest.update(LAYOUT.encode())
    return digest.hexdigest()[:16]


def build_dir() -> Path:
    import torch

    return cache_root() / f"{torch.__version__}-{source_hash()}"


def _library(directory: Path) -> Path:
    return directory / f"{NAME}.so"  # the name torch.utils.cpp_extension gives it


def _import_library(path: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(NAME, str(path))
    spec = importlib.util.spec_from_file_location(NAME, str(path), loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[NAME] = module
    return module


def _ninja_on_path() -> None:
    """``ninja`` on PATH for the build (torch's extension builder runs it by name): the
    PyPI package's binary, appended through the emulator's ``Patches``."""
    if shutil.which("ninja"):
        return
    try:
        import ninja  # PyPI package; ships the binary
    except ImportError:
        raise EmulationError(
            "the Gaudi emulator must be compiled once but ninja is not installed; "
            "fix: pip install ninja (or pip install 'hpu-plugin[emulator]')"
        ) from None
    from hpu_emulator.runtime import append_to_path

    append_to_path(ninja.BIN_DIR, "ninja")


def _check_compiler() -> None:
    """``CXX`` (default ``c++``) must name a compiler that runs, before a build starts:
    an empty or wrong one otherwise fails deep in the build with nothing in its log."""
    raw = os.environ.get("CXX")
    fix = ("set CXX to a C++ compiler (e.g. CXX=g++), or unset it to use c++; or let "
           "someone who has one build it with `python -m hpu_emulator build` into a "
           "directory only they (or root) can write, and point HPU_PLUGIN_CACHE_DIR there")
    if raw is not None and not raw.strip():
        raise EmulationError(f"CXX is set but empty, so no C++ compiler can be run; fix: {fix}")
    try:
        command = shlex.split(raw if raw is not None else "c++")
    except ValueError as exc:
        raise EmulationError(f"CXX={raw!r} cannot be read as a command ({exc}); fix: {fix}"
                             ) from None
    name = f"CXX={raw!r}" if raw is not None else "the C++ compiler c++"
    if not command or shutil.which(command[0]) is None:
        raise EmulationError(
            f"the Gaudi emulator must be compiled once but {name} is not on PATH; fix: "
            f"install one (e.g. apt-get install g++) or {fix}"
        )
    try:
        probe = subprocess.run([*command, "--version"], capture_output=True, timeout=60,
                               check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EmulationError(f"{name} does not run ({exc}); fix: {fix}") from None
    if probe.returncode != 0 or not probe.stdout.strip():
        raise EmulationError(
            f"{name} does not run as a C++ compiler (`{shlex.join([*command, '--version'])}` "
            f"exited {probe.returncode} and printed {len(probe.stdout)} bytes); fix: {fix}"
        )


def _explain(exc: BaseException, directory: Path) -> str:
    text = str(exc)
    if "No space left on device" in text:
        return (
            f"compiling the Gaudi emulator ran out of disk space (No space left on device) in "
            f"{cache_root()} or the temporary folder ({tempfile.gettempdir()}); fix: free space "
            "there, or set HPU_PLUGIN_CACHE_DIR (or TMPDIR) to a disk with space, then run "
            "`python -m hpu_emulator build`"
        )
    if "Killed" in text or "out of memory" in text.lower() or "virtual memory" in text:
        return (
            "compiling the Gaudi emulator ran out of memory (it needs about 2 GB); fix: free "
            "memory, or build on a larger machine with `python -m hpu_emulator build` and "
            "copy the cache directory it prints into your own HPU_PLUGIN_CACHE_DIR"
        )
    if "Python.h: No such file" in text:
        return (
            "compiling the Gaudi emulator needs this Python's C headers, and Python.h is "
            f"missing (Python {sysconfig.get_python_version()}, looked for in "
            f"{sysconfig.get_path('include')}); fix: install them (Debian/Ubuntu: apt-get "
            f"install python{sysconfig.get_python_version()}-dev; Fedora/RHEL: dnf install "
            "python3-devel), then run `python -m hpu_emulator build`"
        )
    lines = [line for line in text.splitlines() if ": error:" in line or "fatal error" in line]
    detail = (lines or text.strip().splitlines()[:1] or ["unknown error"])[0].strip()
    log = directory.parent / f"{directory.name}.error.log"
    try:
        trust.write_text(log, f"CXX={os.environ.get('CXX', 'c++')!r}\n{text}\n")
        where = f"the full log is in {log}"
    except (OSError, EmulationError):
        where = "no log could be written"
    return (
        f"compiling the Gaudi emulator with CXX={os.environ.get('CXX', 'c++')!r} failed "
        f"({detail}); {where}; fix: check the compiler (CXX) and torch headers, then run "
        "`python -m hpu_emulator build` to retry"
    )


def load(*, verbose: bool = False, retry: bool = False) -> ModuleType:
    """The runtime module, built first if this torch has no sound cached build.

    Takes the cache's lock (shared) to check and map the build, so a build in progress is
    waited for, never read; a missing or damaged build is (re)built under the exclusive lock.
    A build that failed is not tried again by the next process with the same compiler (each
    would take a minute to print the same error): ``retry`` (``python -m hpu_emulator
    build``) tries again.
    """
    if NAME in sys.modules:
        return sys.modules[NAME]
    directory = build_dir()
    lock_path = cache.lock_path(directory)
    if directory.exists():
        trust.require(_library(directory), cache_root(), "load")
        trust.require(directory / cache.MANIFEST, cache_root(), "read")
        with cache.locked(lock_path, exclusive=False):
            problem = cache.check(directory, _library(directory).name)
            if problem is None:
                return _import_checked(directory)
        sys.stderr.write(f"hpu_plugin: the cached Gaudi emulator {directory} is damaged "
                         f"({problem}); it is not loaded, but rebuilt.\n")
    return _build(directory, verbose=verbose, retry=retry)


def _failure_path(directory: Path) -> Path:
    return directory.parent / f"{directory.name}.failed"


def _compiler() -> str:
    return os.environ.get("CXX", "c++")


def _last_failure(directory: Path) -> str | None:
    """The error of the last failed build of ``directory`` with this compiler, if any."""
    try:
        record = json.loads(_failure_path(directory).read_text())
        if record["cxx"] == _compiler():
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(record["since"])))
            return (f"{record['message']} (that build failed at {stamp}; a process that "
                    "emulates does not try it again with the same CXX)")
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def _record_failure(directory: Path, message: str) -> None:
    with contextlib.suppress(OSError, EmulationError):
        trust.write_text(_failure_path(directory), json.dumps(
            {"cxx": _compiler(), "message": message, "since": time.time()}))


def _import_checked(directory: Path) -> ModuleType:
    library = _library(directory)
    try:
        return _import_library(library)
    except (ImportError, OSError) as exc:
        raise EmulationError(
            f"the cached Gaudi emulator {library} does not load ({exc}); fix: run "
            "`python -m hpu_emulator build --force` to rebuild it"
        ) from exc


def _build(directory: Path, *, verbose: bool, force: bool = False,
           retry: bool = False) -> ModuleType:
    _check_compiler()
    _ninja_on_path()
    try:
        trust.make_dirs(directory.parent)
    except OSError as exc:
        raise EmulationError(
            f"cannot create the emulator build cache {directory.parent} ({exc.strerror}); "
            "fix: set HPU_PLUGIN_CACHE_DIR to a writable directory"
        ) from None
    trust.require(_library(directory), cache_root(), "build into")
    with cache.locked(cache.lock_path(directory), exclusive=True):
        problem = cache.check(directory, _library(directory).name)
        if problem is None and not force:  # another process built it while we waited
            return _import_checked(directory)
        failed = None if force or retry else _last_failure(directory)
        if failed:
            raise EmulationError(failed)
        staging = cache.staging_dir(directory)
        try:
            module = _compile(staging, verbose=verbose)
        except EmulationError as exc:
            _record_failure(directory, str(exc))
            raise
        cache.publish(staging, directory, _library(staging).name)
        _failure_path(directory).unlink(missing_ok=True)
        return module


def rebuild(*, verbose: bool = False) -> Path:
    """Build afresh, replacing the cached build (``build --force``); the build directory."""
    directory = build_dir()
    _build(directory, verbose=verbose, force=True)
    return directory


#: What the compiling child runs: torch's extension builder, into the staging directory.
_CHILD = """
import sys
from torch.utils.cpp_extension import load
load(name=sys.argv[1], sources=sys.argv[4:], extra_cflags=sys.argv[3].split(),
     build_directory=sys.argv[2], with_cuda=False, verbose=True)
"""


def _compile(staging: Path, *, verbose: bool) -> ModuleType:
    """Compile in a child process of its own session, so that an interruption (Ctrl-C,
    SIGTERM) ends the whole build, ninja and every compiler it started, and removes the
    staging directory; a process killed without a chance to clean up (SIGKILL) leaves a
    staging directory that the next build ignores."""
    sys.stderr.write(
        f"hpu_plugin: compiling the Gaudi emulator for torch {_torch_version()} "
        f"(once, about a minute) into {staging.parent} ...\n"
    )
    sys.stderr.flush()
    env = {**os.environ, "HPU_PLUGIN_DISABLE": "1", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    command = [sys.executable, "-c", _CHILD, NAME, str(staging), " ".join(CFLAGS),
               *(str(CSRC / name) for name in SOURCES)]
    with tempfile.TemporaryFile() as out, _terminate_as_interrupt():
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            code = _wait_saying_so(proc)
        except BaseException:
            _end_group(proc)
            shutil.rmtree(staging, ignore_errors=True)
            raise
        out.seek(0)
        text = out.read().decode(errors="replace")
    if verbose:
        sys.stderr.write(text)
    if code != 0:
        message = _explain(RuntimeError(text), build_dir())
        shutil.rmtree(staging, ignore_errors=True)
        raise EmulationError(message)
    sys.stderr.write("hpu_plugin: the Gaudi emulator is built.\n")
    return _import_library(_library(staging))


#: Seconds between the lines that say a build is still going (it is silent otherwise).
PROGRESS_EVERY = 20.0


def _wait_saying_so(proc: subprocess.Popen[bytes]) -> int:
    """Wait for the compiling child, with a line every :data:`PROGRESS_EVERY` seconds: a
    first build takes one to a few minutes, and silence looks like a hang."""
    start = time.monotonic()
    while True:
        try:
            return proc.wait(timeout=PROGRESS_EVERY)
        except subprocess.TimeoutExpired:
            sys.stderr.write(f"hpu_plugin: still compiling the Gaudi emulator "
                             f"({time.monotonic() - start:.0f} s) ...\n")
            sys.stderr.flush()


def _started(pid: int) -> tuple[int, bytes] | None:
    """``(parent pid, start time)`` of a process from ``/proc``, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), fields[19]


def _descendants(pid: int) -> dict[int, bytes]:
    """The processes below ``pid`` with their start times (a pid reused later by another
    process has another start time), from ``/proc``; empty where there is none."""
    parents: dict[int, list[tuple[int, bytes]]] = {}
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        found = _started(int(entry.name)) if entry.name.isdigit() else None
        if found is not None:
            parents.setdefault(found[0], []).append((int(entry.name), found[1]))
    below: dict[int, bytes] = {}
    todo = [pid]
    while todo:
        for child, start in parents.get(todo.pop(), []):
            below[child] = start
            todo.append(child)
    return below


def _end_group(proc: subprocess.Popen[bytes]) -> None:
    """End the compiling child's session: ninja, c++ and cc1plus with it. Ninja starts each
    compile command in a process group of its own, so the processes below the child are
    also ended one by one: a group signal would not reach them once ninja is gone."""
    below = _descendants(proc.pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=5)
            os.killpg(proc.pid, signal.SIGKILL)  # what is left of the group
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue
        break
    for pid, start in below.items():
        now = _started(pid)
        if now is None or now[1] != start:  # ended, or the pid is another process's now
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM during the build unwinds like Ctrl-C (so the build is cleaned up), then ends
    the process by SIGTERM as it would have."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(
            signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    terminated = []

    def interrupt(signum: int, frame: Any) -> None:
        terminated.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    except KeyboardInterrupt:
        if terminated:
            sys.stderr.write("hpu_plugin: the emulator build was terminated and cleaned up.\n")
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
        raise
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _torch_version() -> str:
    import torch

    return torch.__version__
