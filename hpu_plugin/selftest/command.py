"""``hpu-plugin selftest``: run the checks, print the table or JSON, write the report.

Exit status: 0 when every check that could run passed, 1 when a check failed (or hung, or
crashed), 2 when the environment cannot run the checks (no Gaudi software and no emulation,
the plugin not active, torch not importable, or no check could run).
"""

from __future__ import annotations

import argparse
import atexit
import errno
import json
import math
import os
import shutil
import signal
import stat
import sys
import tempfile
import time
from typing import Any

from hpu_plugin.gaudi.environment import RECIPE_CACHE, RECIPE_CACHE_MB, RECIPE_CACHE_PATH
from hpu_plugin.selftest import catalog, faults, protocol
from hpu_plugin.selftest.placement import Placement
from hpu_plugin.selftest.report import document, table
from hpu_plugin.selftest.runner import Outcome, run_check

PROBE_LIMIT = 180.0
#: Set by a launcher in the shell the user runs from; each check sets its own.
LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "LOCAL_SIZE",
                      "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK", "ROLE_RANK", "CROSS_RANK",
                      "HLS_MODULE_ID")


def add_parser(sub: Any) -> None:
    """The subcommand's options, on the ``hpu-plugin`` parser's subparsers."""
    parser = sub.add_parser(
        "selftest", help="run end-to-end checks on this machine's Gaudi (or the emulator)",
        description="Run the end-to-end checks, each in its own process with a time limit. "
        "Exit 0: every check that could run passed (a CANNOT RUN check is no pass: "
        "its reason says why); 1: a check failed; 2: the checks cannot run here.",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--report", metavar="FILE", help="write a bug report (JSON) to FILE")
    parser.add_argument("--only", metavar="CHECK", action="append",
                        help=f"run only this check (repeatable): {', '.join(catalog.NAMES)}")
    parser.add_argument("--skip", metavar="CHECK", action="append", help="leave out this check")
    parser.add_argument("--time-limit", type=float, metavar="SECONDS",
                        help="time limit of every check (default: each check's own)")


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
    env["HF_HUB_OFFLINE"] = "1"  # the checks build their models; nothing is downloaded
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    if RECIPE_CACHE not in env and RECIPE_CACHE_PATH not in env:
        # the checks count compilations from nothing and leave no recipes in the user's cache
        scratch = tempfile.mkdtemp(prefix="hpu-plugin-selftest-recipes-")
        atexit.register(shutil.rmtree, scratch, True)
        env[RECIPE_CACHE] = f"{scratch},false,{RECIPE_CACHE_MB}"
    return env


def _probe(env: dict[str, str]) -> tuple[dict[str, Any], str]:
    """The probe's findings, and why the checks cannot run ("" when they can)."""
    outcome = run_check("probe", "hpu_plugin.selftest.probe", PROBE_LIMIT, env)
    if outcome.status != protocol.PASS:
        return {}, f"the environment probe failed ({outcome.reason}):\n{outcome.tail}"
    probe = outcome.details
    if "torch_error" in probe:
        return probe, f"import torch failed: {probe['torch_error']}"
    activation = probe["activation"]
    if activation.get("status") != "active":
        return probe, (
            f"the plugin is {activation.get('status')}: {activation.get('reason')}; "
            "see `hpu-plugin doctor`"
        )
    return probe, ""


def _listed_modules(probe: dict[str, Any]) -> list[int] | None:
    rows = (probe.get("hl_smi") or {}).get("rows")
    if not rows:
        return None
    try:
        return [int(r["module_id"]) for r in sorted(rows, key=lambda r: int(r["index"]))]
    except (KeyError, ValueError):
        return None


def _run_one(check: catalog.Check, placement: Placement, env: dict[str, str],
             limit: float | None) -> Outcome:
    """Run ``check``, again on other modules while the chosen ones are held by others."""
    spent = 0.0
    while True:
        modules, why = placement.choose(check.modules_needed)
        if modules == []:
            return Outcome(check.name, protocol.CANNOT_RUN, spent, why)
        child = dict(env)
        chosen = ",".join(map(str, modules)) if modules else ""
        if chosen:
            child["HABANA_VISIBLE_MODULES"] = chosen
        outcome = run_check(check.name, check.target, limit or check.limit, child, chosen)
        outcome.seconds += spent
        busy = outcome.details.get("busy_module") if outcome.status == protocol.CANNOT_RUN else None
        if busy is None or not placement.mark_busy(str(busy)):
            return outcome
        spent = outcome.seconds


def _exit_status(outcomes: list[Outcome], problem: str) -> int:
    if any(o.failed for o in outcomes):
        return 1
    if problem or not any(o.status == protocol.PASS for o in outcomes):
        return 2
    return 0


def _environment_problem() -> str:
    from hpu_plugin.gaudi.software import real_gaudi_installed
    from hpu_plugin.settings import emulation_requested

    if not real_gaudi_installed() and not emulation_requested(os.environ):
        return ("no Gaudi here: the Gaudi software (habana_frameworks) is not installed and "
                "HPU_PLUGIN_EMULATE is not set; run on a Gaudi host, or set "
                "HPU_PLUGIN_EMULATE=1 to check the emulator")
    return ""


class Interrupted(Exception):
    """SIGTERM, turned into an exception so that the runner ends its check on the way out."""


def _terminate(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


def run(args: argparse.Namespace) -> int:
    """Run the checks; Ctrl-C or SIGTERM stops the check running (and its workers) and
    exits 130 or 143, as a shell reports those signals, with one line and no traceback."""
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        return _run(args)
    except KeyboardInterrupt:
        print("\nhpu-plugin selftest: interrupted (Ctrl-C); the running check was stopped",
              file=sys.stderr)
        return 128 + signal.SIGINT
    except Interrupted:
        print("hpu-plugin selftest: terminated (SIGTERM); the running check was stopped",
              file=sys.stderr)
        return 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)


def _report_problem(path: str) -> str:
    """Why the report cannot be written to ``path`` ("" when it can): tried now, by writing
    a placeholder, so a missing folder or a full disk is said before the checks run.

    Opened without blocking: a named pipe (or socket) would otherwise hold the command
    before any check until some reader appeared, and is refused whether or not one has.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK
    pipe = ("is a named pipe or socket, not a regular file: writing the report would wait "
            "for a reader")
    try:
        descriptor = os.open(path, flags, 0o666)
    except OSError as exc:
        reason = pipe if exc.errno == errno.ENXIO else exc.strerror or str(exc)
        return _report_refusal(path, reason)
    try:
        if stat.S_ISFIFO(os.fstat(descriptor).st_mode):
            return _report_refusal(path, pipe)
        os.write(descriptor, b'{"status": "running"}\n')
    except OSError as exc:
        return _report_refusal(path, exc.strerror or str(exc))
    finally:
        os.close(descriptor)
    return ""


def _report_refusal(path: str, reason: str) -> str:
    return (f"--report {path}: {reason}; give a regular file path in an existing, writable "
            "folder with free space")


def _run(args: argparse.Namespace) -> int:
    start = time.monotonic()
    try:
        checks = catalog.select(args.only, args.skip)
        faults.parse()
        if args.time_limit is not None and not 0 < args.time_limit < math.inf:
            # inf would wait on a hung check for ever, nan compares false to every bound
            raise ValueError(f"--time-limit {args.time_limit:g}: give a finite number of "
                             "seconds above 0 (e.g. --time-limit 600), or leave it out for "
                             "each check's own limit")
        problem = _report_problem(args.report) if args.report else ""
        if problem:
            raise ValueError(problem)
    except ValueError as exc:
        print(f"hpu-plugin selftest: {exc}", file=sys.stderr)
        return 2
    env = _child_env()
    problem, probe, outcomes, placement = _environment_problem(), {}, [], None
    if not problem:
        probe, problem = _probe(env)
    if not problem:
        try:
            placement = Placement(_listed_modules(probe))
        except ValueError as exc:
            problem = str(exc)
    if placement is not None and not problem:
        for check in checks:
            outcomes.append(_run_one(check, placement, env, args.time_limit))
            if not args.json:
                print(f"  {check.name}: {outcomes[-1].status} ({outcomes[-1].seconds:.1f} s)",
                      file=sys.stderr, flush=True)
    status = _exit_status(outcomes, problem)
    doc = document(outcomes, probe, placement.to_dict() if placement else {}, status, problem,
                   time.monotonic() - start)
    written = ""
    if args.report:
        try:
            with open(args.report, "w") as handle:
                json.dump(doc, handle, indent=2, default=str)
            written = f"report written to {args.report}: attach it to your issue"
        except OSError as exc:
            written = f"hpu-plugin selftest: could not write --report {args.report}: {exc}"
    print(json.dumps(doc, indent=2, default=str) if args.json else table(doc))
    if written and not args.json:
        print(written)
    return status
