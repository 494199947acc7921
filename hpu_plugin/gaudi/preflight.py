"""The pre-flight check of a multi-process job: every rank must see the same Gaudi setup.

On Gaudi a job whose ranks disagree (one node in lazy mode, one on Gaudi2 among Gaudi3, one
with int64 support off, one with a plugin disabled) does not fail cleanly: it hangs in a
collective or trains on different numerics. So when the process group starts, every rank
publishes what it sees through the group's store, and each rank compares all of them here,
before the first collective; a difference stops the job with a message naming the node, the
rank and the variable.

The facts are plain strings (``hpu_job_facts`` hooks return them), so this module needs
neither torch nor a host library. The keys in :data:`IDENTITY` say who a rank is and are not
compared; every other key must be equal on every rank.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hpu_plugin import settings
from hpu_plugin.gaudi import selection
from hpu_plugin.gaudi.config_error import GaudiConfigError
from hpu_plugin.gaudi.visibility import MODULE_ID, MODULES

TIMEOUT_VARIABLE = "HPU_PLUGIN_PREFLIGHT_TIMEOUT"
#: Seconds a rank waits for the others' facts. torchrun and Ray start every rank together,
#: so a rank missing after a minute is dead or stuck.
DEFAULT_TIMEOUT = 60.0

RANK, NODE, NODE_RANK, LOCAL_RANK, MODULE, PER_PROCESS, MODULE_SET = (
    "rank", "node", "node rank", "local rank", "module", "one module per process",
    f"module set by {MODULE_ID}"
)
IDENTITY = frozenset({RANK, NODE, NODE_RANK, LOCAL_RANK, MODULE, PER_PROCESS, MODULE_SET})

#: What a differing fact means, and how to make the ranks agree.
FIXES: Mapping[str, str] = {
    "Gaudi generation": "run the job on one Gaudi generation (hpu-plugin devices on each node)",
    "device selection": f"set {MODULES} the same way on every node (or on none)",
    "PT_ENABLE_INT64_SUPPORT": "set PT_ENABLE_INT64_SUPPORT to the same value on every node",
    "PT_HPU_LAZY_MODE": "set PT_HPU_LAZY_MODE to the same value on every node",
    "hpu-plugin version": "install the same hpu-plugin release on every node",
    "enabled plugins": "install the same plugins and set HPU_PLUGIN_DISABLE / "
    "HPU_PLUGIN_ONLY alike on every node",
}


class PreflightError(GaudiConfigError):
    """Ranks of one job that cannot work together, found before the first collective."""


def parse_timeout(environ: Mapping[str, str]) -> float:
    """``HPU_PLUGIN_PREFLIGHT_TIMEOUT`` in seconds, read by the settings parser as every
    other time is (a positive number in ASCII digits, at most a week), else the default.
    A value it refuses is a :class:`GaudiConfigError` naming the variable, the value and the
    fix, raised in ``init_process_group`` before the ranks start waiting for each other."""
    try:
        return settings.seconds(TIMEOUT_VARIABLE, environ.get(TIMEOUT_VARIABLE), DEFAULT_TIMEOUT)
    except settings.SettingError as exc:
        raise GaudiConfigError.from_setting(exc) from None


def selection_pattern(environ: Mapping[str, str], placement: selection.JobPlacement | None) -> str:
    """How devices are chosen, without the node's own module ids (nodes may differ there)."""
    if placement is not None and placement.per_process:
        return f"one module per process ({MODULES} lists one module)"
    listed = environ.get(MODULES)
    if listed is None:
        return f"{MODULES} unset (local rank i takes module i)"
    count = len(selection.visibility.parse_visible_modules(listed) or ())
    return f"{MODULES} lists {count} module(s) for the node's processes"


def who(facts: Mapping[str, str]) -> str:
    """``node 'host' (node rank 1), rank 3``: how a message names a rank."""
    return (
        f"node {facts.get(NODE, '?')!r} (node rank {facts.get(NODE_RANK, '?')}), "
        f"rank {facts.get(RANK, '?')}"
    )


def compare(ranks: Sequence[Mapping[str, str]]) -> list[str]:
    """Raise :class:`PreflightError` for the first fact a rank sees differently from rank 0,
    or for modules the ranks of one node cannot share; return the warnings."""
    reference = ranks[0]
    for facts in ranks[1:]:
        for key in sorted((set(reference) | set(facts)) - IDENTITY):
            mine, theirs = reference.get(key, "(not reported)"), facts.get(key, "(not reported)")
            if mine != theirs:
                raise PreflightError(
                    key,
                    theirs,
                    f"the same value on every rank; {who(reference)} has {mine!r}",
                    FIXES.get(key, f"make {key} the same on every node"),
                    problem=f"{who(facts)} differs from rank 0",
                )
    return check_nodes(ranks)


def check_nodes(ranks: Sequence[Mapping[str, str]]) -> list[str]:
    """Per node: no two ranks on one module; the node's modules a supported group."""
    nodes: dict[tuple[str, str], list[Mapping[str, str]]] = {}
    for facts in ranks:
        nodes.setdefault((facts.get(NODE, ""), facts.get(NODE_RANK, "")), []).append(facts)
    warnings: list[str] = []
    for members in nodes.values():
        taken: dict[str, Mapping[str, str]] = {}
        for facts in members:
            module = facts.get(MODULE, "")
            if module and module in taken and facts.get(MODULE_SET) == "yes":
                raise PreflightError(
                    MODULE_ID,
                    module,
                    "a different module for every process of a node",
                    f"unset {MODULE_ID}: hccl keeps a module id that is set, and every process "
                    f"the launcher starts inherits it; without it local rank i takes the i-th "
                    f"module of {MODULES} (or module i)",
                    problem=f"{who(facts)} and rank {taken[module].get(RANK)} would both take "
                    f"module {module}",
                )
            if module and module in taken:
                raise PreflightError(
                    MODULES,
                    module,
                    "a different module for every process of a node",
                    f"give each process of the node its own module in {MODULES}",
                    problem=f"{who(facts)} and rank {taken[module].get(RANK)} would both take "
                    f"module {module}",
                )
            taken[module] = facts
        if members[0].get(PER_PROCESS) == "yes" and len(members) > 1:
            warnings.extend(_node_group(members, sorted(int(m) for m in taken if m)))
    return warnings


def _node_group(members: Sequence[Mapping[str, str]], modules: list[int]) -> list[str]:
    """The modules handed out one per process must still form a group Gaudi supports."""
    selection.check_group_size(MODULES, ",".join(map(str, modules)), modules, None)
    if selection.is_supported_group(modules):
        return []
    return [
        f"{who(members[0]).split(', rank')[0]}: its processes hold modules "
        f"{','.join(map(str, modules))}, not a documented group of {len(modules)} "
        f"({selection.supported_groups_text()})"
    ]
