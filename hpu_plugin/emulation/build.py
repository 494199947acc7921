"""Build and load the emulator's C++ runtime, cached per torch version and source hash.

Loading a cached build imports nothing heavy (no ``torch.utils.cpp_extension``), because it
runs inside ``import torch``. A build takes about a minute and 2 GB of compiler memory, so
concurrent processes (``torchrun`` workers) wait on one file lock and share one build.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

from hpu_plugin.emulation.errors import EmulationError

CSRC = Path(__file__).parent / "csrc"
SOURCES = ("emulator.cpp",)
CFLAGS = ("-O2", "-DNDEBUG")
NAME = "hpu_plugin_emulator"


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
    if shutil.which("ninja"):
        return
    try:
        import ninja  # PyPI package; ships the binary
    except ImportError:
        raise EmulationError(
            "the Gaudi emulator must be compiled once but ninja is not installed; "
            "fix: pip install ninja (or pip install 'hpu-plugin[emulator]')"
        ) from None
    os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")


def _check_compiler() -> None:
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler.split()[0]) is None:
        raise EmulationError(
            f"the Gaudi emulator must be compiled once but no C++ compiler ({compiler!r}) is "
            "on PATH; fix: install one (e.g. apt-get install g++) or set CXX, or build it "
            "elsewhere with `python -m hpu_plugin.emulation build` and share "
            f"{cache_root()} (HPU_PLUGIN_CACHE_DIR)"
        )


def _explain(exc: BaseException, directory: Path) -> str:
    text = str(exc)
    if "Killed" in text or "out of memory" in text.lower() or "virtual memory" in text:
        return (
            "compiling the Gaudi emulator ran out of memory (it needs about 2 GB); fix: free "
            "memory or build on a larger machine with `python -m hpu_plugin.emulation build` "
            f"and share {cache_root()} (HPU_PLUGIN_CACHE_DIR)"
        )
    lines = [line for line in text.splitlines() if ": error:" in line or "fatal error" in line]
    detail = (lines or text.strip().splitlines()[:1] or ["unknown error"])[0].strip()
    return (
        f"compiling the Gaudi emulator failed ({detail}); the full log is in {directory}; "
        "fix: check the compiler and torch headers, then run `python -m hpu_plugin.emulation "
        "build` to retry"
    )


def load(*, verbose: bool = False) -> ModuleType:
    """The runtime module, built first if this torch has no cached build."""
    if NAME in sys.modules:
        return sys.modules[NAME]
    directory = build_dir()
    library = _library(directory)
    if library.exists():
        try:
            return _import_library(library)
        except (ImportError, OSError) as exc:
            raise EmulationError(
                f"the cached Gaudi emulator {library} does not load ({exc}); fix: delete "
                f"{directory} and run `python -m hpu_plugin.emulation build`"
            ) from exc
    return _build(directory, verbose=verbose)


def _build(directory: Path, *, verbose: bool) -> ModuleType:
    import fcntl

    _check_compiler()
    _ninja_on_path()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EmulationError(
            f"cannot create the emulator build cache {directory} ({exc.strerror}); "
            "fix: set HPU_PLUGIN_CACHE_DIR to a writable directory"
        ) from None
    with open(directory.parent / f"{directory.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; others wait and reuse it
        library = _library(directory)
        if library.exists():
            return _import_library(library)
        sys.stderr.write(
            f"hpu_plugin: compiling the Gaudi emulator for torch {_torch_version()} "
            f"(once, about a minute) into {directory} ...\n"
        )
        sys.stderr.flush()
        try:
            from torch.utils.cpp_extension import load as cpp_load

            module = cpp_load(
                name=NAME,
                sources=[str(CSRC / name) for name in SOURCES],
                extra_cflags=list(CFLAGS),
                build_directory=str(directory),
                with_cuda=False,
                verbose=verbose,
            )
        except EmulationError:
            raise
        except (Exception, SystemExit) as exc:
            raise EmulationError(_explain(exc, directory)) from exc
        sys.stderr.write("hpu_plugin: the Gaudi emulator is built.\n")
        return module


def _torch_version() -> str:
    import torch

    return torch.__version__
