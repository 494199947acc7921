"""What this machine answers at run time: ``hl-smi``, run as a subprocess with a timeout,
and the job check that needs its answer.

``gaudi/`` keeps the rules and the parsing, as pure functions (``gaudi.hlsmi`` reads the
tool's output, ``gaudi.selection`` checks a job's devices); running the tool is an effect on
the machine, so it lives here, one layer up, where the plugins, hosts, diagnostics and the
self-test ask it.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hpu_plugin import settings
from hpu_plugin.gaudi.config_error import GaudiConfigError
from hpu_plugin.gaudi.hlsmi import (
    INDEX_MODULE_FIELDS,
    HlSmiError,
    parse_csv,
    parse_version,
    rows_to_index_module_map,
)
from hpu_plugin.gaudi.selection import JobPlacement, check_job_from_environ, job_from_environ

#: Seconds to wait for ``hl-smi`` (``HPU_PLUGIN_HLSMI_TIMEOUT`` overrides): it answers in
#: about a second on a healthy host; a hung driver must not hang the job or the command.
TIMEOUT = 10.0


@dataclass(frozen=True)
class HlSmiQuery:
    """The answer to one query: rows, or why there are none (``missing`` is not an error)."""

    rows: list[dict[str, str]] | None
    missing: bool = False
    reason: str = ""
    timed_out: bool = False


def default_timeout() -> float:
    """``HPU_PLUGIN_HLSMI_TIMEOUT`` in seconds; a value we cannot use is an error, since a
    silently replaced or infinite timeout is how a stuck driver turns into a hang."""
    raw = os.environ.get("HPU_PLUGIN_HLSMI_TIMEOUT")
    try:
        return settings.seconds("HPU_PLUGIN_HLSMI_TIMEOUT", raw, TIMEOUT, maximum=3600)
    except settings.SettingError as exc:
        raise GaudiConfigError.from_setting(exc) from None


def query(
    fields: Sequence[str] = INDEX_MODULE_FIELDS,
    timeout: float | None = None,
    executable: str = "hl-smi",
) -> HlSmiQuery:
    """Run ``hl-smi -Q <fields> -f csv`` with a timeout.

    A missing ``hl-smi`` is no error (no Gaudi driver here): ``missing=True``. A timeout, a
    non-zero exit or unreadable output gives ``rows=None`` with the reason. Raises only
    :class:`GaudiConfigError` for a bad ``HPU_PLUGIN_HLSMI_TIMEOUT``.
    """
    ran = _run([executable, "-Q", ",".join(fields), "-f", "csv"], timeout)
    if isinstance(ran, HlSmiQuery):
        return ran
    try:
        return HlSmiQuery(parse_csv(ran, fields))
    except HlSmiError as exc:
        return HlSmiQuery(None, reason=str(exc))


def _run(command: list[str], timeout: float | None) -> str | HlSmiQuery:
    """``hl-smi``'s output, or the answer that says why there is none (see :func:`query`)."""
    timeout = default_timeout() if timeout is None else timeout
    path = shutil.which(command[0])
    if path is None:
        return HlSmiQuery(None, missing=True, reason=f"{command[0]} not found on PATH")
    command = [path, *command[1:]]
    try:
        ran = subprocess.run(command, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return HlSmiQuery(
            None, reason=f"`{' '.join(command)}` did not answer in {timeout:g} s", timed_out=True
        )
    except OSError as exc:
        return HlSmiQuery(None, reason=f"`{' '.join(command)}` could not run: {exc}")
    # A driver tool may print bytes that are not UTF-8: read them as such, never fail on them.
    stdout = ran.stdout.decode("utf-8", errors="replace")
    stderr = ran.stderr.decode("utf-8", errors="replace")
    if ran.returncode != 0:
        detail = (stderr or stdout).strip().splitlines()
        return HlSmiQuery(
            None,
            reason=f"`{' '.join(command)}` exited {ran.returncode}: "
            f"{detail[-1] if detail else 'no output'}",
        )
    return stdout


def firmware_version(timeout: float | None = None, executable: str = "hl-smi") -> str | None:
    """The firmware's version as ``hl-smi -v`` prints it, ``<release>-fw-<firmware>``
    (``1.23.0-fw-62.1.0``), or ``None`` when ``hl-smi`` cannot tell."""
    ran = _run([executable, "-v"], timeout)
    if isinstance(ran, HlSmiQuery):
        return None
    try:
        release, firmware = parse_version(ran)
    except HlSmiError:
        return None
    return f"{release}-fw-{firmware}"


def index_module_map(
    timeout: float | None = None, executable: str = "hl-smi"
) -> dict[int, int] | None:
    """This host's device index to module id map, or ``None`` when ``hl-smi`` cannot tell."""
    answer = query(INDEX_MODULE_FIELDS, timeout, executable)
    if answer.rows is None:
        return None
    try:
        return rows_to_index_module_map(answer.rows)
    except HlSmiError:
        return None


def host_modules(
    timeout: float | None = None, executable: str = "hl-smi"
) -> tuple[int, ...] | None:
    """Module ids on this host, sorted, or ``None`` when unknown (no ``hl-smi``)."""
    mapping = index_module_map(timeout, executable)
    return None if mapping is None else tuple(sorted(mapping.values()))


@functools.lru_cache(maxsize=1)
def cached_index_module_map() -> dict[int, int] | None:
    """:func:`index_module_map`, asked once per process: the host's devices do not change
    while a job runs, and every check of a job needs the same answer."""
    return index_module_map()


def check_this_process(environ: Mapping[str, str], group: bool = True) -> JobPlacement | None:
    """:func:`check_job_from_environ` with this host's ``hl-smi`` map (asked once per process).

    The entry point for the plugins and host adapters: ``None`` outside a launcher, a
    placement (whose ``warnings`` the caller logs) or a :class:`GaudiConfigError`.
    """
    if job_from_environ(environ) is None:
        return None
    return check_job_from_environ(environ, cached_index_module_map(), group)
