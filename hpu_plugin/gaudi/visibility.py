"""Which Gaudi devices a process may use: ``HABANA_VISIBLE_MODULES``, ``HABANA_VISIBLE_DEVICES``,
``HLS_MODULE_ID``.

Module ids are stable across reboots and driver reinstalls; device indices are not. The
Gaudi software takes entry ``i`` of ``HABANA_VISIBLE_MODULES`` for local rank ``i``, so the
order of the list matters and every process of a job must see the same value.
``HABANA_VISIBLE_DEVICES`` is read by the habana container runtime at ``docker run``; set
inside a running process it selects nothing (HabanaAI/Model-References#25).

Each parser returns a value or raises :class:`VisibilityError`; no other exception, for any
input (tested with hypothesis).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from hpu_plugin.gaudi.config_error import GaudiConfigError

MODULES = "HABANA_VISIBLE_MODULES"
DEVICES = "HABANA_VISIBLE_DEVICES"
MODULE_ID = "HLS_MODULE_ID"

#: A Gaudi server (HLS) carries eight modules; no process sees more.
MAX_DEVICES = 8

_INTEGER = re.compile(r"[0-9]+", re.ASCII)


class VisibilityError(GaudiConfigError):
    """A device-selection variable that cannot be parsed or cannot select devices."""


def _integer(variable: str, raw: str, text: str, what: str, fix: str) -> int:
    if not _INTEGER.fullmatch(text):
        raise VisibilityError(
            variable,
            raw,
            f"comma-separated {what} (non-negative integers), e.g. '0,1'",
            fix,
            problem=f"{text!r} is not a {what.rstrip('s')}" if text else "an entry is empty",
        )
    return int(text)


def _id_list(variable: str, raw: str, what: str, fix: str) -> tuple[int, ...]:
    text = raw.strip()
    if not text:
        raise VisibilityError(
            variable,
            raw,
            f"comma-separated {what}, e.g. '0,1'",
            fix,
            problem="it is empty",
        )
    ids = tuple(_integer(variable, raw, part.strip(), what, fix) for part in text.split(","))
    seen: set[int] = set()
    for value in ids:
        if value in seen:
            raise VisibilityError(
                variable,
                raw,
                f"each of the {what} at most once (one process per device)",
                fix,
                problem=f"{value} appears more than once",
            )
        seen.add(value)
    if len(ids) > MAX_DEVICES:
        raise VisibilityError(
            variable,
            raw,
            f"at most {MAX_DEVICES} {what} (one Gaudi server)",
            fix,
            problem=f"it lists {len(ids)}",
        )
    return ids


def parse_visible_modules(raw: str | None) -> tuple[int, ...] | None:
    """Module ids in local-rank order, or ``None`` when unset (every module on the host)."""
    if raw is None:
        return None
    return _id_list(
        MODULES,
        raw,
        "module ids",
        f"list module ids from `hl-smi -Q index,module_id -f csv`, e.g. {MODULES}=0,1, "
        "or unset it to use every device",
    )


def parse_visible_devices(raw: str | None) -> tuple[int, ...] | None:
    """Device indices, or ``None`` when unset or ``all`` (every device)."""
    if raw is None or raw.strip().lower() == "all":
        return None
    return _id_list(
        DEVICES,
        raw,
        "device indices",
        f"list device indices, e.g. {DEVICES}=0,1, or 'all'; to select devices inside a "
        f"process use {MODULES} (module ids) instead",
    )


def parse_module_id(raw: str | None) -> int | None:
    """``HLS_MODULE_ID``: the single module this process acquires, or ``None`` when unset."""
    if raw is None:
        return None
    text = raw.strip()
    if not _INTEGER.fullmatch(text):
        raise VisibilityError(
            MODULE_ID,
            raw,
            "one module id (a non-negative integer), e.g. '0'",
            f"set {MODULE_ID} to a single module id, or unset it and list modules in {MODULES}",
            problem="it is not a single module id",
        )
    return int(text)


def visible_modules(environ: Mapping[str, str]) -> tuple[int, ...] | None:
    return parse_visible_modules(environ.get(MODULES))


def visible_devices(environ: Mapping[str, str]) -> tuple[int, ...] | None:
    return parse_visible_devices(environ.get(DEVICES))


def check_modules_exist(
    modules: tuple[int, ...],
    index_to_module: Mapping[int, int],
    variable: str = MODULES,
    raw: str | None = None,
) -> None:
    """Every selected module must be on this host (``hl-smi``); indices given as module ids
    are the commonest cause of "device not found" (optimum-habana#1089), so say so."""
    host = sorted(set(index_to_module.values()))
    missing = [m for m in modules if m not in host]
    if not missing:
        return
    value = raw if raw is not None else ",".join(map(str, modules))
    problem = f"module id(s) {','.join(map(str, missing))} not on this host"
    if all(m in index_to_module for m in modules):
        mapped = ",".join(str(index_to_module[m]) for m in modules)
        problem += " (these look like device indices, not module ids)"
        fix = (
            f"device indices {value} are module ids {mapped} on this host "
            f"(`hl-smi -Q index,module_id -f csv`): set {variable}={mapped}"
        )
    else:
        choices = ",".join(map(str, host))
        fix = f"choose module ids from {choices} (`hl-smi -Q index,module_id -f csv`)"
    raise VisibilityError(
        variable,
        value,
        f"module ids present on this host: {','.join(map(str, host))}",
        fix,
        problem=problem,
    )
