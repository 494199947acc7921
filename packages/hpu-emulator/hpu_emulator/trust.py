"""Whether the emulator may load, run or write what is in its cache.

A cache that another user can write to is a way into every process of this user that
emulates: a library planted there is mapped by ``import torch``, a symlink planted as the
lock or the error log makes this user's process truncate a file of theirs, a program
planted beside the ``hl-smi`` shim runs under their name. So before the emulator loads,
runs or writes anything in its cache, each entry from the cache root down to that thing
must be owned by this user or by root and writable by nobody else. A group counts as this
user's own when no other account is in it (the private group a umask of 002 makes
group-writable). Symlinks are followed only when the link itself passes.

What the emulator creates there it creates with modes that pass (directories 0755, files
0644 or 0755, whatever the umask allows more), and never through a symlink.
"""

from __future__ import annotations

import functools
import os
import stat
from pathlib import Path

from hpu_emulator.errors import EmulationError

DIRECTORY_MODE = 0o755


def problem(path: Path, root: Path) -> str | None:
    """What makes ``path`` (under ``root``) untrustworthy, or ``None``.

    Entries that do not exist yet pass: this process creates them, in a directory that
    passed, so nobody else can put them there first. Each directory above ``root`` must
    belong to this user or root, and be writable by nobody else unless it has the sticky
    bit (``/tmp``): its owner, or anyone who can write it, could swap the cache for theirs.
    """
    reason = _open_ancestor(root)
    if reason:
        return reason
    entry = root
    for part in (None, *path.relative_to(root).parts):
        if part is not None:
            entry = entry / part
        try:
            info = os.lstat(entry)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(info.st_mode):
            reason = _ownership(entry, info, "the symlink ")
            if reason:
                return reason
            try:
                info = os.stat(entry)
            except FileNotFoundError:
                return f"{entry} is a symlink to nothing"
        reason = _ownership(entry, info, "")
        if reason:
            return reason
    return None


def _open_ancestor(root: Path) -> str | None:
    """A directory above ``root`` in which another user can rename or replace entries
    (followed to where it really is: a symlinked home is checked where it lives)."""
    uid = os.geteuid()
    above = Path(os.path.realpath(root.parent))
    for directory in (*reversed(above.parents), above):
        try:
            info = os.stat(directory)
        except OSError:
            continue
        if info.st_uid not in (uid, 0):  # its owner may rename anything inside it
            return f"{directory} above the cache belongs to {_user(info.st_uid)}"
        if info.st_mode & stat.S_ISVTX:
            continue  # /tmp: others may add entries, not rename or remove this user's
        if info.st_mode & stat.S_IWOTH or (
                info.st_mode & stat.S_IWGRP and not _only_member(info.st_gid, uid)):
            return (f"{directory} above the cache can be written by other users (mode "
                    f"{stat.filemode(info.st_mode)}, no sticky bit), who could replace the "
                    "cache inside it")
    return None


def require(path: Path, root: Path, doing: str) -> None:
    """Refuse to ``doing`` (e.g. "load") ``path`` unless :func:`problem` finds nothing."""
    reason = problem(path, root)
    if reason is None:
        return
    raise EmulationError(
        f"the Gaudi emulator will not {doing} {path}: {reason}, so another user could have "
        "put there what it would run or overwrite; fix: use a cache only you can write "
        "(unset HPU_PLUGIN_CACHE_DIR for ~/.cache/hpu_plugin, or point it to a directory of "
        f"your own), or make {root} yours (chown, then chmod go-w); to share one build, "
        "build it as its owner or root with `python -m hpu_emulator build` and let others "
        "read it"
    )


def make_dirs(path: Path) -> None:
    """``mkdir -p`` with mode 0755 for every directory it creates (``Path.mkdir`` gives
    missing parents the umask's mode, which may be group-writable)."""
    missing = []
    entry = path
    while not entry.exists():
        missing.append(entry)
        if entry.parent == entry:
            break
        entry = entry.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, DIRECTORY_MODE)
        except FileExistsError:
            pass


def create(path: Path, *, mode: int = 0o644, truncate: bool = True,
           readable: bool = False) -> int:
    """Open ``path`` for writing (and reading, when ``readable``), created with ``mode`` if
    missing, never through a symlink (``O_NOFOLLOW``): the descriptor. A symlink there is
    refused with :class:`EmulationError`; other failures raise their ``OSError``."""
    flags = (os.O_RDWR if readable else os.O_WRONLY) | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    if truncate:
        flags |= os.O_TRUNC
    try:
        return os.open(path, flags, mode)
    except OSError as exc:
        if os.path.islink(path):
            raise EmulationError(
                f"the Gaudi emulator will not write {path}: it is a symlink, which the "
                "emulator never makes; fix: remove it, and check who could write that "
                "directory"
            ) from None
        raise exc


def write_text(path: Path, text: str, *, mode: int = 0o644) -> None:
    """Write ``text`` to ``path`` as :func:`create` opens it."""
    with os.fdopen(create(path, mode=mode), "w") as handle:
        handle.write(text)


def _ownership(entry: Path, info: os.stat_result, what: str) -> str | None:
    uid = os.geteuid()
    if info.st_uid not in (uid, 0):
        return f"{what}{entry} belongs to {_user(info.st_uid)}"
    if stat.S_ISLNK(info.st_mode):
        return None  # a link's own mode means nothing
    if info.st_mode & stat.S_IWOTH:
        return f"{what}{entry} is writable by every user (mode {stat.filemode(info.st_mode)})"
    if info.st_mode & stat.S_IWGRP and not _only_member(info.st_gid, uid):
        return (f"{what}{entry} is writable by the group {_group(info.st_gid)} "
                f"(mode {stat.filemode(info.st_mode)})")
    return None


@functools.cache
def _only_member(gid: int, uid: int) -> bool:
    """Is ``uid`` the one account in group ``gid`` (as its primary group, listed or not)?"""
    import grp
    import pwd

    try:
        me = pwd.getpwuid(uid)
        members = set(grp.getgrgid(gid).gr_mem)
    except KeyError:
        return False
    if members - {me.pw_name}:
        return False
    return all(account.pw_uid == uid for account in pwd.getpwall() if account.pw_gid == gid)


def _user(uid: int) -> str:
    import pwd

    try:
        return f"the user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _group(gid: int) -> str:
    import grp

    try:
        return f"{grp.getgrgid(gid).gr_name} (gid {gid})"
    except KeyError:
        return f"gid {gid}"
