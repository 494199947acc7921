"""A cache another user can write to is not trusted: nothing planted there is loaded, run
or written through, and the refusal names the path and the fix."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from hpu_emulator import build, cache, fake_hlsmi, trust
from hpu_emulator.errors import EmulationError

from .conftest import environ, run

VICTIM = "export KEEP=me\n"


@pytest.fixture(scope="module")
def sound_library() -> Path:
    library = build._library(build.build_dir())
    assert cache.check(library.parent, library.name) is None, "build the emulator first"
    return library


def _publish(root: Path, sound_library: Path) -> Path:
    """A sound build in the cache ``root`` (``HPU_PLUGIN_CACHE_DIR``) of a child process."""
    env = environ(HPU_PLUGIN_CACHE_DIR=str(root))
    directory = Path(run("from hpu_emulator import build; print(build.build_dir())",
                         env).stdout.strip())
    trust.make_dirs(directory.parent)
    staging = cache.staging_dir(directory)
    shutil.copy(sound_library, staging / sound_library.name)
    cache.publish(staging, directory, sound_library.name)
    return directory


IMPORT = """
import sys, torch
from hpu_plugin import activation
print("STATE", activation.state["status"], "hpu_plugin_emulator" in sys.modules)
"""


def _import_torch(root: Path) -> tuple[str, str]:
    done = run(IMPORT, environ(HPU_PLUGIN_EMULATE="1", HPU_PLUGIN_CACHE_DIR=str(root)))
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr


@pytest.mark.parametrize("sticky", [False, True])
def test_the_directory_hpu_plugin_cache_dir_names_is_checked_too(tmp_path, sound_library,
                                                                 sticky):
    """A 777 directory named by HPU_PLUGIN_CACHE_DIR lets anyone swap the emulator's cache
    inside it; with the sticky bit (as /tmp) they cannot rename what is this user's."""
    named = tmp_path / "cache"
    _publish(named, sound_library)
    named.chmod(0o1777 if sticky else 0o777)
    out, err = _import_torch(named)
    if sticky:
        assert "STATE active True" in out
        return
    assert "STATE failed False" in out
    assert f"{named} above the cache can be written by other users" in err
    assert "fix:" in err


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_directory_above_the_cache_of_another_user_is_refused(tmp_path, sound_library):
    """Its owner may rename the cache inside it, write bits or not."""
    named = tmp_path / "theirs" / "cache"
    _publish(named, sound_library)
    os.chown(named.parent, 65534, 65534)
    out, err = _import_torch(named)
    assert "STATE failed False" in out
    assert f"{named.parent} above the cache belongs to" in err


def test_a_private_cache_loads(tmp_path, sound_library):
    _publish(tmp_path / "cache", sound_library)
    out, _ = _import_torch(tmp_path / "cache")
    assert "STATE active True" in out


@pytest.mark.parametrize("where", ["library", "build directory", "cache root"])
def test_a_cache_every_user_can_write_is_not_loaded(tmp_path, sound_library, where):
    directory = _publish(tmp_path / "cache", sound_library)
    target = {"library": directory / sound_library.name, "build directory": directory,
              "cache root": directory.parent}[where]
    target.chmod(target.stat().st_mode | 0o002)
    out, err = _import_torch(tmp_path / "cache")
    assert "STATE failed False" in out  # plugin off, the library never mapped
    assert f"will not load {directory / sound_library.name}" in err
    assert f"{target} is writable by every user" in err
    assert "fix:" in err and "HPU_PLUGIN_CACHE_DIR" in err


@pytest.mark.skipif(os.geteuid() != 0, reason="planting as another user needs chown (root)")
def test_a_library_another_user_planted_is_not_loaded(tmp_path, sound_library):
    directory = _publish(tmp_path / "cache", sound_library)
    os.chown(directory / sound_library.name, 65534, 65534)
    out, err = _import_torch(tmp_path / "cache")
    assert "STATE failed False" in out
    assert "belongs to" in err and "uid 65534" in err


def test_a_planted_lock_symlink_truncates_nothing(tmp_path):
    victim = tmp_path / "bashrc"
    victim.write_text(VICTIM)
    lock = tmp_path / "build.lock"
    lock.symlink_to(victim)
    for exclusive in (True, False):
        with pytest.raises(EmulationError, match="is a symlink"), \
                cache.locked(lock, exclusive=exclusive):
            pass
    assert victim.read_text() == VICTIM


def test_a_planted_error_log_symlink_truncates_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("HPU_PLUGIN_CACHE_DIR", str(tmp_path / "cache"))
    directory = build.build_dir()
    trust.make_dirs(directory.parent)
    victim = tmp_path / "bashrc"
    victim.write_text(VICTIM)
    (directory.parent / f"{directory.name}.error.log").symlink_to(victim)
    message = build._explain(RuntimeError("x.cpp:1: error: boom"), directory)
    assert "no log could be written" in message and "boom" in message
    assert victim.read_text() == VICTIM


def test_the_hlsmi_shim_goes_last_on_path_and_not_through_a_symlink(tmp_path, monkeypatch):
    """A ``git`` beside the shim never runs in place of the user's; a ``.hl-smi.<pid>``
    symlink planted for the shim's temporary file is refused, its target untouched."""
    monkeypatch.setenv("HPU_PLUGIN_CACHE_DIR", str(tmp_path / "cache"))
    user_bin = tmp_path / "user-bin"
    user_bin.mkdir()
    monkeypatch.setenv("PATH", f"{user_bin}{os.pathsep}{os.path.dirname(shutil.which('sh'))}")
    monkeypatch.setattr(fake_hlsmi.shutil, "which", lambda name: None)  # no real hl-smi
    from hpu_emulator import runtime
    from hpu_plugin.patching import Patches

    patches = Patches()
    monkeypatch.setattr(runtime, "patches", patches)
    try:
        directory = fake_hlsmi.install_shim()
        assert directory is not None and (directory / "hl-smi").exists()
        entries = os.environ["PATH"].split(os.pathsep)
        assert entries[0] == str(user_bin) and entries[-1] == str(directory)
        victim = tmp_path / "bashrc"
        victim.write_text(VICTIM)
        (directory / "hl-smi").unlink()
        (directory / f".hl-smi.{os.getpid()}").symlink_to(victim)
        with pytest.raises(EmulationError, match="is a symlink"):
            fake_hlsmi.install_shim()
        assert victim.read_text() == VICTIM
    finally:
        patches.undo()


def test_a_cache_made_under_umask_002_is_trusted(tmp_path, sound_library):
    """Directories, library and manifest get modes nobody else can write, whatever the
    umask, so the build this user made is never refused for its modes."""
    old = os.umask(0o002)
    try:
        directory = _publish(tmp_path / "a" / "cache", sound_library)
    finally:
        os.umask(old)
    for entry in (tmp_path / "a", directory.parent, directory, directory / cache.MANIFEST,
                  directory / sound_library.name):
        assert entry.stat().st_mode & 0o022 == 0, (entry, oct(entry.stat().st_mode))
    assert trust.problem(directory / sound_library.name, directory.parent) is None


def test_the_refusal_names_path_and_fix_in_process(tmp_path):
    root = tmp_path / "cache"
    root.mkdir()
    root.chmod(0o777)
    with pytest.raises(EmulationError) as caught:
        trust.require(root / "x.so", root, "load")
    text = str(caught.value)
    assert str(root) in text and "writable by every user" in text and "chmod go-w" in text
