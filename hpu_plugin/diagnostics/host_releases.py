"""Where the installed torch, Transformers and Accelerate stand against the tested releases
(``hosts.support``), and which host adapters stayed out: ``hpu-plugin info`` and ``doctor``.

Reads the hosts (their tested releases, whether the adapters are installed) and imports
what they wait for only in :func:`probe_adapters`; nothing below ``diagnostics/`` imports it.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any

from hpu_plugin.hosts.support import (
    HOSTS,
    HPU_CODE_SINCE,
    LIBRARIES_TESTED,
    MATRIX,
    release_key,
    tested_releases,
)

if TYPE_CHECKING:
    from hpu_plugin.gaudi.findings import Finding

#: The libraries whose adapters ``probe_adapters`` imports (top-level module names): the
#: hosts, PEFT and sentence-transformers.
PROBED = (*HOSTS, "peft", "sentence_transformers")

TESTED = "tested"
UNTESTED = "in range, untested"
OUT_OF_RANGE = "out of range"
NOT_INSTALLED = "not installed"
UNREADABLE = "unreadable version"


@dataclass(frozen=True)
class Standing:
    """Where one installed host release stands against the matrix."""

    host: str
    version: str | None
    standing: str
    message: str

    def to_dict(self) -> dict[str, str | None]:
        return {"version": self.version, "standing": self.standing, "message": self.message}


def _joined(versions: list[str]) -> str:
    return versions[0] if len(versions) == 1 else ", ".join(versions[:-1]) + " and " + versions[-1]


def classify(host: str, version: str | None) -> Standing:
    """``tested``, ``in range, untested`` or ``out of range`` for ``host`` at ``version``."""
    if host not in HOSTS:
        raise ValueError(f"unknown host {host!r}: expected one of {', '.join(HOSTS)}")
    tested = tested_releases(host)
    listed = f"tested: {_joined(tested)}"
    if version is None:
        return Standing(host, None, NOT_INSTALLED, f"{host} is not installed ({listed})")
    key = release_key(version)
    if key is None:
        return Standing(host, version, UNREADABLE, f"cannot read {host} version {version!r}")
    known = [(k, v) for v in tested if (k := release_key(v)) is not None]
    if any(k == key for k, _ in known):
        return Standing(host, version, TESTED, f"{host} {version} is tested")
    low, high = known[0][0], known[-1][0]
    if low < key < high:
        below = [v for k, v in known if k < key][-1]
        above = next(v for k, v in known if k > key)
        return Standing(
            host, version, UNTESTED,
            f"{host} {version} is in the supported range but not tested (the nearest tested "
            f"releases are {below} and {above})",
        )
    if key < low:
        message = f"{host} {version} is out of range: older than {tested[0]}, the oldest tested"
        since = HPU_CODE_SINCE.get(host)
        since_key = release_key(since) if since is not None else None
        if since_key is not None and key < since_key:
            message += f"; it has no HPU code (that starts at {since})"
    else:
        message = f"{host} {version} is out of range: newer than {tested[-1]}, the newest tested"
    return Standing(host, version, OUT_OF_RANGE, message)


def installed_version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def combination(versions: dict[str, str | None]) -> dict[str, str | None]:
    """Whether the installed releases, together, are one entry of the matrix."""
    keys = {host: release_key(v) if v is not None else None for host, v in versions.items()}
    for entry in MATRIX:
        if all(keys.get(host) == release_key(entry.version(host)) for host in HOSTS):
            message = f"tested together (matrix entry {entry.name!r})"
            return {"entry": entry.name, "message": message}
    pairs = "; ".join(
        f"transformers {e.transformers} + accelerate {e.accelerate} on torch {e.torch}"
        for e in MATRIX
    )
    return {"entry": None, "message": f"not a tested combination (tested: {pairs})"}


def standings(versions: dict[str, str | None] | None = None) -> dict[str, Standing]:
    """The standing of each host, for the installed releases unless ``versions`` is given."""
    if versions is None:
        versions = {host: installed_version(host) for host in HOSTS}
    return {host: classify(host, versions.get(host)) for host in HOSTS}


# -- the adapters ----------------------------------------------------------------------------------


def probe_adapters() -> dict[str, Any]:
    """Import every host module an adapter is waiting for, then say which adapters stayed out.

    Adapters install when their host module is imported; a diagnostic that imported nothing
    would report nothing. Modules a release does not have (``transformers.commands.env`` in
    5.x, ``transformers.cli.system`` in 4.x) are listed as absent: the adapter for the
    other release's location covers them. Never raises.
    """
    from hpu_plugin import hosts, importhook, patching, state

    absent: list[str] = []
    probed: list[str] = []
    # What the imports log (a stay-out line, a compile backend switched by a module compiled
    # at import) is in the report; printed, it would read as a fault of the diagnostic.
    logger = logging.getLogger("hpu_plugin")
    level = logger.level
    logger.setLevel(logging.ERROR)
    # What the hosts' own imports print (bitsandbytes' "Failed to load CPU gemm_4bit_forward"
    # warning, reached through peft) is theirs, not the diagnostic's: kept, not shown.
    printed = io.StringIO()
    try:
        with contextlib.redirect_stderr(printed):
            while True:
                names = [
                    name for name in importhook.pending()
                    if name.split(".")[0] in PROBED and name not in probed
                    and name not in absent
                ]
                if not names:
                    break
                for name in names:
                    _import(name, probed, absent)
    except Exception as exc:  # a diagnostic reports, it does not fail
        patching.record_out("hpu-plugin", "probe", f"probing the adapters failed: {exc!r}")
    finally:
        logger.setLevel(level)
        _unbind(printed)
    installed = hosts.installed()
    failed = hosts.failure()
    return {
        "installed": installed,
        "note": "" if installed else f"none installed: {failed}" if failed else (
            f"none installed, the plugin is not active here (activation: {state.get('status')}, "
            f"{state.get('reason')})"
        ),
        "stayed_out": dict(patching.this_process.stayed_out),
        "imported": probed,
        "absent": absent,
        "printed_by_hosts": printed.getvalue(),
    }


def _unbind(buffer: io.StringIO) -> None:
    """A logging handler a host made during the probe holds the buffer as its stream
    (Transformers' default handler takes ``sys.stderr`` when it is made): it writes to the
    real stderr again, so what is logged after the probe is shown."""
    loggers = [logging.getLogger(), *(item for item in logging.Logger.manager.loggerDict.values()
                                      if isinstance(item, logging.Logger))]
    for each in loggers:
        for handler in each.handlers:
            if isinstance(handler, logging.StreamHandler) and handler.stream is buffer:
                handler.setStream(sys.stderr)


def _import(name: str, probed: list[str], absent: list[str]) -> None:
    import importlib
    import importlib.util

    from hpu_plugin.patching import record_out

    top = name.split(".")[0]
    if importlib.util.find_spec(top) is None:
        absent.append(name)
        return
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        absent.append(name)
    except Exception as exc:  # the host itself fails to import: say so
        record_out(top, f"for {name}", f"importing {name} failed: {exc!r}")
        absent.append(name)
    else:
        probed.append(name)


#: What each library gets on Gaudi, for ``hpu-plugin info``.
LIBRARY_ADAPTERS = {
    "peft": "adapter: infer_device names hpu",
    "sentence-transformers": "adapter: plain path without optimum-habana, one Gaudi per pool "
    "worker",
    "trl": "runs through Transformers and Accelerate; its default gradient checkpointing "
    "through the torch.hpu.device adapter",
    "diffusers": "no adapter needed (pipeline.to('hpu'))",
}


def library_standings() -> dict[str, dict[str, str | None]]:
    """The libraries beyond the matrix hosts: installed release, tested or not, and what the
    plugin does for them. Only exact tested releases count: each was tested alone, on the
    newest matrix entry."""
    result: dict[str, dict[str, str | None]] = {}
    for name, tested in LIBRARIES_TESTED.items():
        version = installed_version(name)
        key = release_key(version) if version is not None else None
        if version is None:
            standing = NOT_INSTALLED
        elif key is None:
            standing = UNREADABLE
        elif any(key == release_key(t) for t in tested):
            standing = TESTED
        else:
            standing = "untested"
        result[name] = {
            "version": version, "standing": standing, "tested": ", ".join(tested),
            "plugin": LIBRARY_ADAPTERS[name],
        }
    return result


def report(versions: dict[str, str | None] | None = None, probe: bool = True) -> dict[str, Any]:
    """The standing of the hosts (installed, unless ``versions`` names others), their
    combination, and the adapters that stayed out (``probe``: after importing what they
    wait for)."""
    if versions is None:
        versions = {host: installed_version(host) for host in HOSTS}
    return {
        "hosts": {host: s.to_dict() for host, s in standings(versions).items()},
        "combination": combination(versions),
        "libraries": library_standings(),
        "adapters": probe_adapters() if probe else None,
    }


def report_lines(result: dict[str, Any]) -> list[str]:
    """``report()`` as the lines ``hpu-plugin info`` prints."""
    lines = ["Supported releases (tested: the version matrix in the hpu-plugin README):"]
    for host, standing in result["hosts"].items():
        version = standing["version"] or "-"
        lines.append(f"  {host:<14} {version:<14} {standing['standing']}")
        if standing["standing"] not in (TESTED, NOT_INSTALLED):
            lines.append(f"    {standing['message']}")
    lines.append(f"  {'together':<14} {'':<14} {result['combination']['message']}")
    libraries = result.get("libraries") or {}
    if libraries:
        lines.append("Libraries tested on the newest hosts:")
    for name, library in libraries.items():
        version = library["version"] or "-"
        lines.append(f"  {name:<22} {version:<10} {library['standing']:<14} {library['plugin']}")
        if library["standing"] == "untested":
            lines.append(f"    tested: {library['tested']}")
    adapters = result["adapters"]
    if adapters is not None:
        if adapters["note"]:
            lines.append(f"Host adapters: {adapters['note']}")
        elif not adapters["stayed_out"]:
            lines.append("Host adapters: every adapter is installed")
        else:
            lines.append("Host adapters that stayed out:")
            lines.extend(
                f"  {adapter}: {reason}" for adapter, reason in adapters["stayed_out"].items()
            )
    return lines


#: doctor's severity for each standing: only an untested or unknown release is worth a look.
SEVERITY = {
    TESTED: "ok", UNTESTED: "info", OUT_OF_RANGE: "warning", UNREADABLE: "warning",
    NOT_INSTALLED: "info",
}


def findings(result: dict[str, Any]) -> list[Finding]:
    """``report()`` as ``hpu-plugin doctor`` findings: out of range and adapters left out
    are warnings (the job may run, without what the adapter would have routed)."""
    from hpu_plugin.gaudi.findings import Finding

    found = []
    for host, standing in result["hosts"].items():
        severity = SEVERITY[standing["standing"]]
        fix = ""
        if severity == "warning":
            fix = f"install a tested release of {host}: {_joined(tested_releases(host))}"
        found.append(Finding(host, severity, standing["message"], fix))  # type: ignore[arg-type]
    for name, library in (result.get("libraries") or {}).items():
        if library["standing"] in ("untested", UNREADABLE):
            found.append(Finding(
                name, "warning" if name in ("peft", "sentence-transformers") else "info",
                f"{name} {library['version']} is not a tested release (tested: "
                f"{library['tested']}); {library['plugin']}",
                f"install {name}=={library['tested'].split(', ')[-1]}",
            ))
    adapters = result["adapters"] or {}
    for adapter, reason in adapters.get("stayed_out", {}).items():
        needless = reason.startswith("not needed")  # the host has no fault to adapt
        found.append(
            Finding(
                "adapters", "info" if needless else "warning",
                f"the {adapter} adapter stayed out: {reason}",
                "" if needless else "use tested releases (hpu-plugin info lists them)",
            )
        )
    return found
