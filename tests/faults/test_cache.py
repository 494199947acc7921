"""Damaged and raced emulator build caches: found by reading before anything is mapped,
rebuilt rather than loaded, and waited for with a bounded, explained wait."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hpu_emulator import build, cache
from hpu_emulator.errors import EmulationError

from .conftest import environ, run


@pytest.fixture(scope="module")
def sound_library() -> Path:
    """The library of this torch's real cached build (CI builds it up front)."""
    library = build._library(build.build_dir())
    assert cache.check(library.parent, library.name) is None, "build the emulator first"
    return library


@pytest.fixture
def cached(tmp_path: Path, sound_library: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A sound build published into a private cache (HPU_PLUGIN_CACHE_DIR)."""
    monkeypatch.setenv("HPU_PLUGIN_CACHE_DIR", str(tmp_path / "cache"))
    directory = build.build_dir()
    directory.parent.mkdir(parents=True)
    staging = cache.staging_dir(directory)
    shutil.copy(sound_library, staging / sound_library.name)
    cache.publish(staging, directory, sound_library.name)
    return directory / sound_library.name


def _rewrite_manifest(library: Path) -> None:
    """Make the manifest agree with the damaged file: only the ELF check can find it."""
    staging = library.parent.parent / "restage"
    shutil.copytree(library.parent, staging)
    (staging / cache.MANIFEST).unlink()
    cache.publish(staging, library.parent, library.name)


def _truncate(library: Path) -> None:
    library.write_bytes(library.read_bytes()[: library.stat().st_size // 2])


def _empty(library: Path) -> None:
    library.write_bytes(b"")


def _flip(library: Path) -> None:
    data = bytearray(library.read_bytes())
    data[len(data) // 2] ^= 0xFF
    library.write_bytes(bytes(data))


def _no_manifest(library: Path) -> None:
    (library.parent / cache.MANIFEST).unlink()


def _garbage_manifest(library: Path) -> None:
    (library.parent / cache.MANIFEST).write_text("{not json")


def _headers_past_end(library: Path) -> None:
    data = bytearray(library.read_bytes())
    struct.pack_into("<Q", data, 0x28, len(data) * 4)  # e_shoff beyond the end
    library.write_bytes(bytes(data))
    _rewrite_manifest(library)


def _not_elf(library: Path) -> None:
    library.write_text("this is not a shared library\n" * 100)
    _rewrite_manifest(library)


def _missing(library: Path) -> None:
    library.unlink()


DAMAGE = {
    "truncated": (_truncate, "truncated"), "empty": (_empty, "truncated"),
    "flipped byte": (_flip, "SHA-256"), "no manifest": (_no_manifest, "unfinished"),
    "garbage manifest": (_garbage_manifest, "unreadable"),
    "ELF headers past the end": (_headers_past_end, "past its end"),
    "not ELF": (_not_elf, "not a 64-bit ELF"), "library missing": (_missing, "missing"),
}


def test_a_sound_cache_passes(cached):
    assert cache.check(cached.parent, cached.name) is None


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damage_is_found_by_reading(cached, damage):
    spoil, words = DAMAGE[damage]
    spoil(cached)
    problem = cache.check(cached.parent, cached.name)
    assert problem is not None and words in problem


@pytest.mark.parametrize("damage", ["truncated", "flipped byte", "ELF headers past the end"])
def test_a_damaged_build_is_rebuilt_and_never_mapped(cached, sound_library, damage,
                                                     monkeypatch, capsys):
    """``load()`` finds the damage and builds again (the compiler run is replaced by a copy
    of a sound library: compiling is not what is tested); the damaged file is never
    imported, and the new build is published whole."""
    DAMAGE[damage][0](cached)
    imported: list[Path] = []
    monkeypatch.setattr(build, "_import_library", lambda path: imported.append(path) or path)
    monkeypatch.delitem(sys.modules, build.NAME, raising=False)

    def compile_into(staging: Path, *, verbose: bool) -> object:
        shutil.copy(sound_library, staging / sound_library.name)
        return "rebuilt"

    monkeypatch.setattr(build, "_compile", compile_into)
    assert build.load() == "rebuilt" and imported == []
    assert "damaged" in capsys.readouterr().err
    assert cache.check(cached.parent, cached.name) is None


HOLDER = """
import sys, time
from pathlib import Path
from hpu_emulator import cache
with cache.locked(Path(sys.argv[1]), exclusive=True):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _hold(lock: Path, seconds: float) -> subprocess.Popen[str]:
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(HOLDER), str(lock),
                               str(seconds)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_a_lock_wait_names_the_holder_and_gives_up(tmp_path, monkeypatch, capsys):
    lock = tmp_path / "build.lock"
    holder = _hold(lock, 60)
    try:
        monkeypatch.setenv(cache.ENV_LOCK_TIMEOUT, "1.5")
        with pytest.raises(EmulationError) as caught, cache.locked(lock, exclusive=False):
            pass
        message = str(caught.value)
        assert f"pid {holder.pid}" in message and cache.ENV_LOCK_TIMEOUT in message
        assert f"held by pid {holder.pid}" in capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_a_lock_released_in_time_is_taken(tmp_path, monkeypatch, capsys):
    lock = tmp_path / "build.lock"
    holder = _hold(lock, 2)
    try:
        monkeypatch.setenv(cache.ENV_LOCK_TIMEOUT, "60")
        with cache.locked(lock, exclusive=True):
            assert f"pid {os.getpid()}" in cache._holder(lock)
        assert "got the emulator build lock" in capsys.readouterr().err
    finally:
        holder.wait(timeout=30)


def test_a_bad_lock_timeout_is_refused_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV_LOCK_TIMEOUT, "forever")
    with pytest.raises(EmulationError, match=cache.ENV_LOCK_TIMEOUT), \
            cache.locked(tmp_path / "x.lock", exclusive=True):
        pass


@pytest.mark.parametrize("cxx, words", [
    ("", "CXX is set but empty"), ("false", "does not run as a C++ compiler"),
    ("sh -c :", "does not run as a C++ compiler"), ("no-such-compiler-xyz", "not on PATH"),
    ('"unclosed', "cannot be read as a command"),
])
def test_a_bad_compiler_is_refused_naming_cxx(monkeypatch, cxx, words):
    monkeypatch.setenv("CXX", cxx)
    with pytest.raises(EmulationError, match="CXX") as caught:
        build._check_compiler()
    assert words in str(caught.value) and "fix:" in str(caught.value)


def test_import_torch_survives_a_truncated_cache_it_cannot_rebuild(tmp_path, sound_library):
    """The issue's SIGBUS: a truncated cached library, and no compiler to rebuild it.
    ``import torch`` works, the message names CXX, the plugin is off, and it exported
    nothing (no Gaudi defaults left behind)."""
    env = environ(HPU_PLUGIN_EMULATE="1", HPU_PLUGIN_CACHE_DIR=str(tmp_path), CXX="false")
    directory = Path(run("from hpu_emulator import build; print(build.build_dir())",
                         env).stdout.strip())
    directory.parent.mkdir(parents=True)
    staging = cache.staging_dir(directory)
    shutil.copy(sound_library, staging / sound_library.name)
    cache.publish(staging, directory, sound_library.name)
    _truncate(directory / sound_library.name)
    done = run("""
        import os, torch
        from hpu_plugin import activation
        print("STATE", activation.state["status"], os.environ.get("PT_HPU_LAZY_MODE"))
    """, env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "STATE failed None" in done.stdout
    assert "damaged" in done.stderr and "CXX='false'" in done.stderr
