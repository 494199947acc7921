"""``python -m peer_suites run [accelerate|peft|transformers ...] [--subset ci|full]``.

Fetches the pinned hosts' sdists, runs the chosen tests once on CPU and once on the
emulated hpu (two devices), compares them test by test with expectations.json, prints a
summary and exits 1 on any unexpected difference (2 when a run could not complete).
``run diffusers --checkout PATH`` runs a library's own tests from a checkout of its
repository instead (its sdist ships none; CI cannot fetch a repository). ``bridge --checkout
PATH`` runs the Gaudi bridge's own tests on the emulator (:mod:`peer_suites.bridge`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from peer_suites import bridge
from peer_suites.compare import HEADER, Summary, compare
from peer_suites.hub_stand_ins import prepare as prepare_hub_stand_ins
from peer_suites.sources import REPO, PeerSetupError, cache_root, pinned_version, source_tree
from peer_suites.suites import SUITES, Suite

# The shell's own Gaudi, plugin and host device settings would change what each run means.
_CLEARED_PREFIXES = ("HPU_PLUGIN_", "HABANA_", "PT_HPU_", "HLS_", "TRANSFORMERS_TEST_")
_CLEARED = {"PT_ENABLE_INT64_SUPPORT", "ACCELERATE_USE_CPU", "CUDA_VISIBLE_DEVICES"}


def _environment(suite: Suite, device: str, outcomes: Path, source: Path) -> dict[str, str]:
    """The run's environment: the shell's minus device settings, plus this device's."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in _CLEARED and not key.startswith(_CLEARED_PREFIXES)
    }
    # The hosts' tests launch `accelerate launch`/`torchrun` by name: this interpreter's.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    # The sdist first: its `tests` folder (Transformers' mixins) before this repository's.
    paths = [*([str(source)] if suite.own_tests else []), str(REPO)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["HF_HUB_OFFLINE"] = "1"  # no weights or datasets are downloaded at run time
    if suite.hub_stand_ins:
        env["HF_HOME"] = str(prepare_hub_stand_ins(cache_root() / "hf-home"))
    env["HPU_PLUGIN_PEER_OUTCOMES"] = str(outcomes)
    env["HPU_PLUGIN_PEER_PARENT"] = str(os.getpid())
    env["HPU_PLUGIN_PEER_SOURCE"] = str(source)
    if device == "hpu":
        env.update(HPU_PLUGIN_EMULATE="1", HPU_PLUGIN_EMULATE_DEVICES="2")
        env.update(suite.hpu_env)  # a suite's own switches win (TRL: a whole server)
    return env


def _run(suite: Suite, device: str, subset: str, source: Path, timeout: float,
         checkout: Path | None = None) -> dict:
    """One pytest run of the suite on one device; its outcomes by node id. With
    ``checkout``, the library's own tests in that checkout of its repository."""
    logs = cache_root() / "runs"
    logs.mkdir(parents=True, exist_ok=True)
    outcomes = logs / f"{suite.name}-{subset}-{device}.json"
    log = logs / f"{suite.name}-{subset}-{device}.log"
    outcomes.unlink(missing_ok=True)
    paths = suite.ci if subset == "ci" else suite.full
    args = suite.ci_args if subset == "ci" else suite.full_args
    if checkout is not None:
        paths, args = suite.checkout_tests, suite.checkout_args
    env = _environment(suite, device, outcomes, source)
    if checkout is not None and device == "hpu":
        env.update(suite.checkout_hpu_env)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "peer_suites.outcomes",
        "-p",
        "peer_suites.seeding",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rN",
        "-o",
        "addopts=",  # the hosts' own (coverage, doctest globs) are for their CI
        "--timeout=600",
        *args,
        *paths,
    ]
    started = time.monotonic()
    with open(log, "w", encoding="utf-8") as handle:
        try:
            subprocess.run(
                command,
                # Our own tests run from the repository, so that their node ids resolve from
                # the working directory when a host test re-runs itself in a subprocess.
                cwd=checkout or (REPO if suite.own_tests else source),
                env=env,
                stdout=handle,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            print(f"peer_suites: {suite.name} on {device} exceeded {timeout:.0f} s; log: {log}")
    print(f"peer_suites: {suite.name} on {device}: {time.monotonic() - started:.0f} s, log {log}")
    if not outcomes.exists():
        raise PeerSetupError(f"{suite.name} on {device} ended without results; see {log}")
    return json.loads(outcomes.read_text(encoding="utf-8"))


def _markdown(summaries: list[Summary], subset: str, seconds: float) -> str:
    """The RESULTS.md text of this run: date, versions, counts."""
    import torch

    versions = ", ".join(
        f"{name} {pinned_version(SUITES[name].distribution)}"
        for name in (s.suite.removesuffix("-checkout") for s in summaries)
    )
    lines = [
        f"## `python -m peer_suites run --subset {subset}`",
        "",
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"torch {torch.__version__}, {versions}; {seconds / 60:.1f} min on a 2-core machine.",
        "",
        "| suite | collected | ran on hpu | passed on cpu | passed on hpu "
        "| expected-different | unexpected |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        lines.append(
            f"| {s.suite} | {s.collected} | {s.ran_on_hpu} | {s.passed_cpu} | {s.passed_hpu} "
            f"| {s.expected_different} | {len(s.unexpected)} |"
        )
    return "\n".join(lines) + "\n"


def _saved(suite: Suite, device: str, subset: str) -> dict:
    """The outcomes of the last run (for ``compare``, after editing expectations.json)."""
    path = cache_root() / "runs" / f"{suite.name}-{subset}-{device}.json"
    if not path.exists():
        raise PeerSetupError(f"no saved {device} run of {suite.name} ({subset}): run it first")
    return json.loads(path.read_text(encoding="utf-8"))


def _checked_checkout(names: list[str], checkout: Path) -> Path:
    """The checkout of one suite's repository, with the tests that suite runs from it."""
    if len(names) != 1 or not SUITES[names[0]].checkout_tests:
        have = ", ".join(name for name, suite in SUITES.items() if suite.checkout_tests)
        raise PeerSetupError(f"--checkout takes one suite with repository tests listed: {have}")
    checkout = checkout.expanduser().resolve()
    missing = [path for path in SUITES[names[0]].checkout_tests if not (checkout / path).exists()]
    if missing:
        raise PeerSetupError(
            f"--checkout {checkout}: no {', '.join(missing)}; give a checkout of the "
            f"{SUITES[names[0]].distribution} repository"
        )
    return checkout


def run(
    names: list[str], subset: str, timeout: float, markdown: Path | None, rerun: bool = True,
    checkout: Path | None = None,
) -> int:
    """Run the suites (or reuse the last runs); print the summary; 0 when all is expected.
    With ``checkout``: one suite's own tests from a checkout of its repository."""
    started = time.monotonic()
    summaries = []
    if checkout is not None:
        checkout, subset = _checked_checkout(names, checkout), "checkout"
    for name in names:
        suite = SUITES[name]
        if rerun:
            version = pinned_version(suite.distribution)  # the installed release is the pin
            own = suite.sdist_tests and checkout is None
            source = source_tree(suite.distribution, version) if own else REPO
            cpu = _run(suite, "cpu", subset, source, timeout, checkout)
            hpu = _run(suite, "hpu", subset, source, timeout, checkout)
        else:
            cpu, hpu = _saved(suite, "cpu", subset), _saved(suite, "hpu", subset)
        if subset == "checkout":  # offline, a test that needs the Hub fails on both runs
            summaries.append(compare(f"{name}-checkout", cpu, hpu, None, strict=False))
            if not summaries[-1].collected:
                raise PeerSetupError(f"no test of {checkout} ran; see the logs")
            continue
        selected = (
            None
            if subset == "ci" and suite.ci_args
            else set(suite.ci if subset == "ci" else suite.full)
        )
        summaries.append(compare(name, cpu, hpu, selected,
                                 strict=not suite.same_failure_is_no_difference))
    print("\n" + HEADER)
    for summary in summaries:
        print(summary.row())
        if subset == "checkout":
            print(f"  failed on cpu and on hpu alike (not compared): {summary.failed_both}")
    problems = [line for summary in summaries for line in summary.unexpected]
    for line in problems:
        print("UNEXPECTED " + line)
    if markdown is not None:
        markdown.write_text(
            _markdown(summaries, subset, time.monotonic() - started), encoding="utf-8"
        )
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    """Parse the command line; setup problems are one line and exit status 2."""
    parser = argparse.ArgumentParser(prog="python -m peer_suites", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    runner = sub.add_parser("run", help="run suites on cpu and hpu and compare")
    again = sub.add_parser("compare", help="compare the last runs again (no tests run)")
    for command in (runner, again):
        command.add_argument(
            "suites", nargs="*", metavar="suite", help=f"any of {', '.join(SUITES)} (default all)"
        )
        command.add_argument("--subset", choices=["ci", "full"], default="ci")
        command.add_argument("--markdown", type=Path, help="also write the summary as Markdown")
        command.add_argument(
            "--checkout", type=Path, metavar="PATH",
            help="run one suite's own tests from this checkout of its repository "
            "(libraries whose sdist ships none: sentence-transformers, trl, diffusers)",
        )
    runner.add_argument("--timeout", type=float, default=3600.0, help="seconds per pytest run")
    bridge_runner = sub.add_parser(
        "bridge", help="the Gaudi bridge's own tests on the emulator, by area and cause")
    bridge_runner.add_argument("--checkout", type=Path, required=True, metavar="PATH",
                               help="a checkout of HabanaAI/gaudi-pytorch-bridge")
    bridge_runner.add_argument("--mode", choices=bridge.MODES, default="eager")
    bridge_runner.add_argument("--dut", choices=bridge.DUTS, default="gaudi2")
    bridge_runner.add_argument("--markdown", type=Path, help="also write the summary as Markdown")
    bridge_runner.add_argument("--outcomes", type=Path, metavar="JSON",
                               help="summarize the outcomes a run saved instead of running")
    bridge_runner.add_argument("--timeout", type=float, default=6 * 3600.0,
                               help="seconds for the whole run")
    bridge_runner.add_argument("tests", nargs="*", metavar="TEST",
                               help="paths inside tests/pytest_working (default: all)")
    options = parser.parse_args(argv)
    if options.command == "bridge":
        try:
            if options.outcomes is not None:
                outcomes = bridge.load(options.outcomes)
            else:
                outcomes = bridge.run(options.checkout, options.mode, options.dut,
                                      options.tests, options.timeout)
        except PeerSetupError as error:
            print(f"peer_suites: {error}", file=sys.stderr)
            return 2
        text = bridge.markdown(outcomes, options.mode, options.dut)
        print(text)
        if options.markdown is not None:
            options.markdown.write_text(text, encoding="utf-8")
        return 0
    unknown = [name for name in options.suites if name not in SUITES]
    if unknown:
        parser.error(f"unknown suite {', '.join(unknown)}; choose from {', '.join(SUITES)}")
    try:
        names = options.suites or list(SUITES)
        timeout = getattr(options, "timeout", 0.0)
        return run(
            names, options.subset, timeout, options.markdown, options.command == "run",
            options.checkout,
        )
    except (PeerSetupError, subprocess.CalledProcessError) as error:
        print(f"peer_suites: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
