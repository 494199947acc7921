"""``hpu-plugin``: what the plugin sees, and whether a Gaudi job set up like this will work.

``info``     versions, mode, activation, plugins and their hooks in call order, decisions
``devices``  index, module id, generation, memory, visibility, group validity
``plugins``  installed, enabled, disabled, failed (with the reason)
``doctor``   every rule of ``hpu_plugin.gaudi``; exits 1 when something will fail
``selftest`` end-to-end checks on this machine's Gaudi (``hpu_plugin.selftest``)

Each takes ``--json``. This module only parses arguments and prints: what is reported is
collected by ``hpu_plugin.diagnostics``, which imports torch only when there is a Gaudi to
look at, so ``--help`` and a machine without Gaudi stay fast.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from hpu_plugin import __version__
from hpu_plugin.diagnostics.checks import Job, collect_doctor
from hpu_plugin.diagnostics.devices import collect_devices
from hpu_plugin.diagnostics.info import collect_info
from hpu_plugin.diagnostics.plugins import collect_plugins


def _print_info(info: dict[str, Any]) -> None:
    print("hpu-plugin info")
    for name, version in info["versions"].items():
        print(f"  {name:<16} {version or 'not installed'}")
    if info["message"]:
        print(f"\n{info['message']}")
    activation = info["activation"]
    print(f"\nActivation: {activation.get('status')} ({activation.get('reason')})")
    print(f"Mode: {info['mode']}")
    print(f"Gaudi available: {'yes' if info['available'] else 'no'}")
    print(f"GPU Migration Toolkit (PT_HPU_GPU_MIGRATION): {info['gpu_migration']}")
    if info["import_time_compiles"]:
        print(
            f"torch.compile calls by libraries at import: {info['import_time_compiles']} "
            "(backend replaced; logged at debug on the 'hpu_plugin' logger)"
        )
    patched = info["patched"]
    if patched["hosts"] or patched["emulator"] or patched["environment"]:
        print(f"Patched: {len(patched['hosts'])} host attributes (reversible; --json lists "
              f"them); emulator: {', '.join(patched['emulator']) or 'nothing'}; "
              f"environment: {', '.join(patched['environment']) or 'nothing'}")
    plugins = info["plugins"]
    if "error" in plugins:
        print(f"\nPlugins: {plugins['error']}")
    else:
        print("\nPlugins:")
        for name, plugin in plugins.items():
            print(f"  {name:<16} {plugin['status']:<9} {plugin['distribution']}")
        print("\nHooks (call order, first asked first):")
        _print_call_order(info["hook_kinds"])
    if info["decisions"]:
        print("\nDecisions now:")
        for hook, decision in info["decisions"].items():
            print(f"  {hook}: {decision}")
    if info.get("fast_paths"):
        print("\nFast paths (docs/fast-paths.md):")
        for name, path in info["fast_paths"].items():
            kernel = "" if path["kernel"] == "present" else f"; kernel {path['kernel']}"
            print(f"  {name:<16} {path['state']:<4} {path['setting']}: {path['by']}{kernel}")
    if "support" in info:
        from hpu_plugin.diagnostics.host_releases import report_lines

        print("", *report_lines(info["support"]), sep="\n")


def _print_devices(result: dict[str, Any]) -> None:
    if result["message"]:
        print(result["message"])
    if not result["devices"]:
        return
    print(f"{'index':>5} {'module':>6} {'generation':<10} {'memory':>10} {'visible':<7} name")
    for d in result["devices"]:
        memory = f"{d['memory_mib'] // 1024} GiB" if d["memory_mib"] else "?"
        print(
            f"{_cell(d['index']):>5} {_cell(d['module_id']):>6} {d['generation'] or '?':<10} "
            f"{memory:>10} {'yes' if d['visible'] else 'no':<7} {d['name'] or ''}"
        )
    group = result["group"]
    if group:
        verdict = "valid" if group["valid"] else "INVALID"
        print(f"\nOne process per visible module: {verdict}: {group['message']}")
        for warning in group.get("warnings", []):
            print(f"  warning: {warning}")
    print(f"(source: {result['source']})")


def _cell(value: object) -> str:
    return "?" if value is None else str(value)


def _print_plugins(result: dict[str, Any]) -> None:
    if result["error"]:
        print(f"Plugins cannot load: {result['error']}")
        return
    if not result["plugins"]:
        print("No plugins installed in the hpu_plugin entry-point group.")
    for p in result["plugins"]:
        origin = "first-party" if p["first_party"] else "third-party"
        line = f"{p['name']:<16} {p['status']:<9} {p['distribution']} {p['version']} ({origin})"
        print(line + (f": {p['reason']}" if p["reason"] else ""))
        if p["hooks"]:
            print(f"  hooks: {', '.join(p['hooks'])}")
    print("\nCall order (first asked first):")
    _print_call_order(result["hook_kinds"])


def _print_call_order(kinds: dict[str, list[tuple[str, str]]]) -> None:
    """One line a hook; a plugin that wraps its own implementation is named once, with both
    kinds (``quantization (wrapper, plain)``), not twice."""
    for hook, detail in kinds.items():
        order: dict[str, list[str]] = {}
        for name, kind in detail:
            order.setdefault(name, []).append(kind)
        text = ", ".join(
            name if roles == ["plain"] else f"{name} ({', '.join(roles)})"
            for name, roles in order.items()
        )
        print(f"  {hook:<28} {text or '(none)'}")


_MARK = {"error": "ERROR", "warning": "WARN", "info": "info", "ok": "ok"}


def _print_doctor(result: dict[str, Any]) -> None:
    for f in result["findings"]:
        print(f"[{_MARK[f['severity']]:>5}] {f['check']}: {f['message']}")
        if f["fix"] and f["severity"] in ("error", "warning") and f["fix"] not in f["message"]:
            print(f"        fix: {f['fix']}")
    verdict = (
        "nothing will fail" if result["ok"] else f"{result['errors']} error(s): this will fail"
    )
    print(f"\n{verdict} ({result['warnings']} warning(s))")


# -- command line ----------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hpu-plugin", description="What hpu-plugin sees on this machine, and what will fail."
    )
    parser.add_argument("--version", action="version", version=f"hpu-plugin {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", parents=[common], help="versions, mode, plugins, hooks, decisions")
    sub.add_parser("devices", parents=[common], help="devices, module ids, visibility, groups")
    sub.add_parser("plugins", parents=[common], help="installed plugins and their status")
    doctor = sub.add_parser("doctor", parents=[common], help="check every rule; exit 1 on errors")
    doctor.add_argument("--processes", type=_positive, default=0, metavar="N",
                        help="check a launch with N (1 or more) processes per node")
    doctor.add_argument("--compile", action="store_true", help="the job calls torch.compile")
    doctor.add_argument("--dtype", type=_dtype, help="the job's precision: bf16, fp16, fp8, fp32")
    doctor.add_argument("--bnb", type=int, choices=(4, 8), help="bitsandbytes bits")
    doctor.add_argument("--bnb-quant-type", default="nf4", help="4-bit type (default nf4)")
    from hpu_plugin.selftest import command as selftest

    selftest.add_parser(sub)
    return parser


def _positive(text: str) -> int:
    """``--processes``: refused before any work unless a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of processes: give 1 or more")
    return value


def _dtype(text: str) -> str:
    """``--dtype``: refused before any work unless a precision the rules know."""
    from hpu_plugin.diagnostics.checks import DTYPE_NAMES

    if text.strip().lower() not in DTYPE_NAMES:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} is not a precision; accepted: {', '.join(sorted(DTYPE_NAMES))}")
    return text


def _job(args: argparse.Namespace) -> Job:
    return Job(args.processes, args.compile, args.dtype, args.bnb, args.bnb_quant_type)


#: Exit status when the reader of stdout went away (``hpu-plugin info | head -1``): 128 + SIGPIPE,
#: what a shell reports for a command ended by a closed pipe.
EXIT_CLOSED_STDOUT = 141


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. A reader that closes stdout early (``| head``) is not an error of
    ours: the command stops quietly, with no traceback, and exits ``EXIT_CLOSED_STDOUT``."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # a closed pipe shows here for output still buffered
    except BrokenPipeError:
        # Python flushes stdout again at exit; pointed at devnull, that flush cannot fail.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_CLOSED_STDOUT
    return code


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "selftest":
        from hpu_plugin.selftest.command import run as selftest

        return selftest(args)
    commands: dict[str, tuple[Callable[[], dict[str, Any]], Callable[[dict[str, Any]], None]]] = {
        "info": (collect_info, _print_info),
        "devices": (collect_devices, _print_devices),
        "plugins": (collect_plugins, _print_plugins),
        "doctor": (lambda: collect_doctor(_job(args)), _print_doctor),
    }
    collect, show = commands[args.command]
    result = collect()
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        show(result)
    if args.command == "doctor":
        return 0 if result["ok"] else 1
    if args.command == "info" and result["activation"].get("status") == "failed":
        return 1  # the reason is on the Activation line
    return 0
