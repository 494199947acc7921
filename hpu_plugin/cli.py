"""``hpu-plugin``: what the plugin sees, and whether a Gaudi job set up like this will work.

``info``     versions, mode, activation, plugins and their hooks in call order, decisions
``devices``  index, module id, generation, memory, visibility, group validity
``plugins``  installed, enabled, disabled, failed (with the reason)
``doctor``   every rule of ``hpu_plugin.gaudi``; exits 1 when something will fail

Each takes ``--json``. torch is imported only when Gaudi software is installed or emulation
is requested (importing it is what activates the plugin and, on the emulator, puts its
``hl-smi`` on ``PATH``), so ``--help`` and a machine without Gaudi stay fast.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from typing import Any

from hpu_plugin import __version__

GAUDI_DISTRIBUTION = "habana-torch-plugin"
HOOKS = (
    "hpu_prepare_environment",
    "hpu_device_available",
    "hpu_device_properties",
    "hpu_compile_backend",
    "hpu_ddp_backend",
    "hpu_quantization_device_map",
    "hpu_shape_buckets",
)
#: Versions with HPU code in the hosts (host-map.md §0): Transformers turns HPU off below
#: Accelerate 1.5.0 (SPEC R3).
MINIMUM = {"transformers": (4, 51), "accelerate": (1, 5)}


# -- what is here ----------------------------------------------------------------------------


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _emulation_requested() -> bool:
    from hpu_plugin.activation import emulation_requested

    return emulation_requested(os.environ)


def _gaudi_software() -> bool:
    """Real Gaudi software (the emulator's stand-ins do not count)."""
    from hpu_plugin.activation import real_gaudi_installed

    return real_gaudi_installed()


def _gaudi_expected() -> bool:
    """Whether there is anything to look at: real Gaudi software, or emulation asked for."""
    return _gaudi_software() or _emulation_requested()


def _no_gaudi_reason() -> str:
    return (
        f"No Gaudi here: the Gaudi software ({GAUDI_DISTRIBUTION}, imported as "
        "habana_frameworks) is not installed and HPU_PLUGIN_EMULATE is not set, so the plugin "
        "stays off. Install the Gaudi software on a Gaudi host, or set HPU_PLUGIN_EMULATE=1 "
        "to emulate one."
    )


def _activate() -> dict[str, str]:
    """Import torch (which runs the plugin's activation) when there is Gaudi to look at."""
    from hpu_plugin import activation

    if _gaudi_expected() and "torch" not in sys.modules:
        try:
            import torch  # noqa: F401  runs hpu_plugin.activation.autoload
        except Exception as exc:  # report, do not crash the diagnostic
            return {"status": "failed", "reason": f"import torch failed: {exc!r}"}
    return dict(activation.state)


def _hpu_module() -> Any:
    torch = sys.modules.get("torch")
    return getattr(torch, "hpu", None) if torch is not None else None


def _device_available() -> bool:
    hpu = _hpu_module()
    try:
        return bool(hpu is not None and hpu.is_available())
    except Exception:
        return False


def _environ_with_defaults() -> dict[str, str]:
    """The environment the Gaudi software will see: the plugin's defaults fill what the user
    left unset (they already have, if activation ran in this process)."""
    from hpu_plugin.gaudi.environment import apply_defaults

    environ = dict(os.environ)
    apply_defaults(environ)
    return environ


def _mode_text(environ: Mapping[str, str]) -> str:
    from hpu_plugin.gaudi.environment import LAZY_MODE
    from hpu_plugin.gaudi.errors import GaudiConfigError
    from hpu_plugin.gaudi.modes import mode

    try:
        name = mode(environ).name
    except GaudiConfigError as exc:
        return f"invalid: {exc}"
    from hpu_plugin.gaudi.environment import APPLIED

    ours = LAZY_MODE in APPLIED or LAZY_MODE not in os.environ
    by = "set by hpu-plugin" if ours else "set by the user"
    return f"{name} ({LAZY_MODE}={environ.get(LAZY_MODE)}, {by})"


# -- info --------------------------------------------------------------------------------------


def _decide(call: Callable[[], Any]) -> str:
    from hpu_plugin.hookspecs import Refusal

    try:
        result = call()
    except Refusal as exc:
        return f"refused: {exc}"
    except Exception as exc:
        return f"failed: {exc!r}"
    return "no opinion" if result is None else repr(result)


def collect_info() -> dict[str, Any]:
    activation = _activate()
    environ = _environ_with_defaults()
    versions = {
        "hpu-plugin": __version__,
        "python": sys.version.split()[0],
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "accelerate": _version("accelerate"),
        "pluggy": _version("pluggy"),
        "gaudi_software": _version(GAUDI_DISTRIBUTION)
        or ("emulated" if _emulation_requested() else None),
    }
    info: dict[str, Any] = {
        "versions": versions,
        "gaudi": _gaudi_expected(),
        "emulated": _emulation_requested() and not _gaudi_software(),
        "activation": activation,
        "mode": _mode_text(environ),
        "available": False,
        "message": "" if _gaudi_expected() else _no_gaudi_reason(),
    }
    from hpu_plugin.registry import get_registry

    try:
        registry = get_registry()
    except Exception as exc:  # a bad switch value: report it
        info["plugins"] = {"error": str(exc)}
        info["hooks"] = {}
        return info
    info["plugins"] = {
        name: {"status": r.status, "distribution": r.distribution, "hooks": list(r.hooks)}
        for name, r in registry.records.items()
    }
    info["hooks"] = {hook: registry.call_order(hook) for hook in HOOKS}
    decisions: dict[str, str] = {}
    if _gaudi_expected():
        available = _decide(registry.device_available)
        info["available"] = available == "True"
        decisions["hpu_device_available"] = available
        if info["available"]:
            decisions["hpu_device_properties"] = _decide(registry.device_properties)
            decisions["hpu_compile_backend(None)"] = _decide(
                lambda: registry.compile_backend(None, "hpu")
            )
            decisions["hpu_compile_backend('inductor')"] = _decide(
                lambda: registry.compile_backend("inductor", "hpu")
            )
            decisions["hpu_ddp_backend(None)"] = _decide(lambda: registry.ddp_backend("hpu", None))
            decisions["hpu_quantization_device_map(bitsandbytes, 4, None)"] = _decide(
                lambda: registry.quantization_device_map("bitsandbytes", 4, None, "hpu")
            )
            for kind in ("length", "batch", "cache"):
                decisions[f"hpu_shape_buckets({kind}, 4096)"] = _decide(
                    lambda kind=kind: registry.shape_buckets(kind, "hpu", 4096)
                )
    info["decisions"] = decisions
    return info


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
    plugins = info["plugins"]
    if "error" in plugins:
        print(f"\nPlugins: {plugins['error']}")
    else:
        print("\nPlugins:")
        for name, plugin in plugins.items():
            print(f"  {name:<16} {plugin['status']:<9} {plugin['distribution']}")
        print("\nHooks (call order, first asked first):")
        for hook, order in info["hooks"].items():
            print(f"  {hook:<28} {', '.join(order) or '(none)'}")
    if info["decisions"]:
        print("\nDecisions now:")
        for hook, decision in info["decisions"].items():
            print(f"  {hook}: {decision}")


# -- devices -----------------------------------------------------------------------------------


def collect_devices() -> dict[str, Any]:
    from hpu_plugin.gaudi import hlsmi, selection, visibility
    from hpu_plugin.gaudi.errors import GaudiConfigError
    from hpu_plugin.gaudi.generations import generation_from_name

    _activate()
    result: dict[str, Any] = {"devices": [], "source": None, "message": "", "group": None}
    answer = hlsmi.query(hlsmi.DEVICE_FIELDS)
    if answer.rows is None and not answer.missing and not answer.timed_out:
        answer = hlsmi.query(hlsmi.INDEX_MODULE_FIELDS)
    rows: list[dict[str, str]] = answer.rows or []
    if answer.rows is not None:
        result["source"] = "hl-smi"
    elif _device_available():
        hpu = _hpu_module()
        rows = [{"index": str(i)} for i in range(hpu.device_count())]
        result["source"] = "torch.hpu"
    if not rows:
        result["message"] = (
            _no_gaudi_reason()
            if not _gaudi_expected()
            else f"No Gaudi device found ({answer.reason})."
        )
    try:
        visible = visibility.visible_modules(os.environ)
        visible_error = ""
    except GaudiConfigError as exc:
        visible, visible_error = None, str(exc)
    fallback_name = ""
    if rows and "name" not in rows[0] and _device_available():
        try:
            fallback_name = str(_hpu_module().get_device_name())
        except Exception:
            fallback_name = ""
    index_map: dict[int, int] = {}
    for row in rows:
        name = row.get("name") or fallback_name
        generation = generation_from_name(name) if name else None
        module = row.get("module_id")
        module_id = int(module) if module is not None and module.isdigit() else None
        index = int(row["index"]) if row.get("index", "").isdigit() else None
        if index is not None and module_id is not None:
            index_map[index] = module_id
        result["devices"].append(
            {
                "index": index,
                "module_id": module_id,
                "name": name or None,
                "generation": generation.name if generation else None,
                "memory_mib": hlsmi.parse_mib(row.get("memory.total", "")),
                "bus_id": row.get("bus_id"),
                "visible": visible is None or (module_id is not None and module_id in visible),
            }
        )
    result["devices"].sort(key=lambda d: (d["index"] is None, d["index"] or 0))
    if visible_error:
        result["group"] = {"valid": False, "modules": None, "message": visible_error}
    elif index_map:
        chosen = visible if visible is not None else tuple(sorted(index_map.values()))
        result["group"] = _group_status(chosen, index_map, selection)
    return result


def _group_status(
    chosen: Sequence[int], index_map: Mapping[int, int], selection: Any
) -> dict[str, Any]:
    """Would a job with one process per visible module work here?"""
    from hpu_plugin.gaudi.errors import GaudiConfigError

    size = len(chosen)
    status: dict[str, Any] = {"modules": list(chosen), "layout": selection.host_layout(index_map)}
    if size <= 1:
        status.update(valid=True, message="a single device: fine for a job that is not distributed")
        return status
    try:
        placement = selection.check_distributed_job(os.environ, size, size, 0, index_map)
    except GaudiConfigError as exc:
        status.update(valid=False, message=str(exc))
        return status
    status.update(valid=True, message=placement.group, warnings=list(placement.warnings))
    return status


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


# -- plugins -----------------------------------------------------------------------------------


def collect_plugins() -> dict[str, Any]:
    from hpu_plugin.registry import get_registry

    try:
        registry = get_registry()
    except Exception as exc:
        return {"error": str(exc), "plugins": [], "call_order": {}}
    plugins = [
        {
            "name": r.name,
            "entry_point": r.value,
            "distribution": r.distribution,
            "version": r.version,
            "first_party": r.first_party,
            "status": r.status,
            "reason": r.reason,
            "hooks": list(r.hooks),
        }
        for r in registry.records.values()
    ]
    return {
        "error": "",
        "plugins": plugins,
        "call_order": {hook: registry.call_order(hook) for hook in HOOKS},
    }


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
    for hook, order in result["call_order"].items():
        print(f"  {hook:<28} {', '.join(order) or '(none)'}")


# -- doctor ------------------------------------------------------------------------------------


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:2])


def collect_doctor(args: argparse.Namespace) -> dict[str, Any]:
    from hpu_plugin.gaudi import environment, generations, hlsmi, modes, selection, visibility
    from hpu_plugin.gaudi.errors import Finding, GaudiConfigError

    findings: list[Finding] = []
    add = findings.append
    if not _gaudi_expected():
        add(Finding("gaudi", "info", _no_gaudi_reason()))
    activation = _activate()
    if activation.get("status") == "failed":
        add(
            Finding(
                "activation",
                "error",
                f"the plugin failed to activate: {activation['reason']}",
                "see the reason; HPU_PLUGIN_DISABLE=1 turns the plugin off meanwhile",
            )
        )
    environ = _environ_with_defaults()

    parsers: list[tuple[str, Callable[[], object]]] = [
        ("HABANA_VISIBLE_MODULES", lambda: visibility.visible_modules(environ)),
        ("HABANA_VISIBLE_DEVICES", lambda: visibility.visible_devices(environ)),
        ("HLS_MODULE_ID", lambda: visibility.parse_module_id(environ.get("HLS_MODULE_ID"))),
        ("PT_HPU_LAZY_MODE", lambda: environment.parse_lazy_mode(environ.get("PT_HPU_LAZY_MODE"))),
        (
            "PT_ENABLE_INT64_SUPPORT",
            lambda: environment.parse_int64_support(environ.get("PT_ENABLE_INT64_SUPPORT")),
        ),
    ]
    env_ok = True
    for name, parse in parsers:
        try:
            parse()
        except GaudiConfigError as exc:
            if name == "HABANA_VISIBLE_DEVICES":  # read at `docker run`, not by the process
                add(Finding(name, "warning", str(exc), exc.fix, name, str(exc.value)))
                continue
            env_ok = False
            add(exc.as_finding(name))

    index_map: dict[int, int] | None = None
    names: list[str] = []
    answer = hlsmi.query(("index", "module_id", "name"))
    if answer.rows is None and not answer.missing and not answer.timed_out:
        answer = hlsmi.query(hlsmi.INDEX_MODULE_FIELDS)
    if not answer.missing or _gaudi_expected():
        if answer.rows is None:
            add(
                Finding(
                    "hl-smi",
                    "warning",
                    f"cannot map device indices to module ids: {answer.reason}",
                    "install the Gaudi driver tools (hl-smi) or put them on PATH",
                )
            )
        else:
            try:
                index_map = hlsmi.rows_to_index_module_map(answer.rows)
                names = [row["name"] for row in answer.rows if row.get("name")]
                add(
                    Finding(
                        "hl-smi",
                        "ok",
                        f"{len(index_map)} device(s), module ids "
                        f"{','.join(map(str, sorted(index_map.values()))) or 'none'}",
                    )
                )
            except hlsmi.HlSmiError as exc:
                add(Finding("hl-smi", "warning", str(exc), "check the Gaudi driver installation"))
    generation = generations.generation_from_name(names[0]) if names else None
    if generation is None and _device_available():
        try:
            generation = generations.generation_from_name(str(_hpu_module().get_device_name()))
        except Exception:
            generation = None
    if generation is not None:
        add(
            Finding(
                "generation",
                "ok",
                f"{generation.name}: bf16"
                + "".join(
                    f", {f}"
                    for f in ("fp16", "fp8", "int64", "bitsandbytes")
                    if generation.supports(f)
                ),
            )
        )

    devices_raw = environ.get("HABANA_VISIBLE_DEVICES")
    try:
        listed = visibility.visible_devices(environ)
    except GaudiConfigError:
        listed = None
    if devices_raw is not None and index_map is not None and env_ok:
        if listed is not None and len(index_map) > len(listed):
            add(
                Finding(
                    "HABANA_VISIBLE_DEVICES",
                    "warning",
                    f"HABANA_VISIBLE_DEVICES={devices_raw!r} lists {len(listed)} device(s) but "
                    f"{len(index_map)} are visible: it only works at `docker run --runtime=habana`",
                    f"select devices with HABANA_VISIBLE_MODULES (module ids: "
                    f"{','.join(str(index_map[i]) for i in listed if i in index_map)})",
                    "HABANA_VISIBLE_DEVICES",
                    devices_raw,
                )
            )

    if env_ok:
        job = None
        try:
            job = selection.job_from_environ(environ)
        except GaudiConfigError as exc:
            add(exc.as_finding("launcher"))
        modules = visibility.visible_modules(environ)
        processes = args.processes or (job[1] if job else len(modules) if modules else 0)
        try:
            if job is not None and not args.processes:
                placement = selection.check_distributed_job(environ, *job, index_map)
            elif processes > 1:
                placement = selection.check_distributed_job(
                    environ, processes, processes, 0, index_map
                )
            else:
                placement = selection.check_distributed_job(environ, 1, 1, 0, index_map)
            add(
                Finding(
                    "devices",
                    "ok",
                    f"{placement.group}"
                    + (
                        f", module ids {','.join(map(str, placement.modules))}"
                        if placement.modules
                        else ""
                    ),
                )
            )
            for warning in placement.warnings:
                add(Finding("devices", "warning", warning))
        except GaudiConfigError as exc:
            add(exc.as_finding("devices"))

        try:
            mode = modes.mode(environ)
            if mode.compile:
                add(Finding("mode", "ok", f"{_mode_text(environ)}: torch.compile uses hpu_backend"))
            else:
                severity = "error" if args.compile else "warning"
                try:
                    modes.check_compile(environ)
                except GaudiConfigError as exc:
                    add(
                        Finding(
                            "mode",
                            severity,
                            f"{_mode_text(environ)}: {exc}",
                            exc.fix,
                            "PT_HPU_LAZY_MODE",
                            environ.get("PT_HPU_LAZY_MODE"),
                        )
                    )
        except GaudiConfigError as exc:
            add(exc.as_finding("mode"))
        findings.extend(generations.int64_findings(generation, environ))

    if args.dtype:
        if generation is None:
            add(Finding("dtype", "info", f"{args.dtype}: generation unknown, not checked"))
        else:
            try:
                generations.check_dtype(generation, args.dtype, "--dtype")
                add(Finding("dtype", "ok", f"{args.dtype} on {generation.name}"))
            except GaudiConfigError as exc:
                add(exc.as_finding("dtype"))
    if args.bnb:
        try:
            findings.extend(
                generations.bitsandbytes_findings(generation, args.bnb, args.bnb_quant_type)
            )
        except GaudiConfigError as exc:
            add(exc.as_finding("bitsandbytes"))
        if _version("bitsandbytes") is None:
            add(
                Finding(
                    "bitsandbytes",
                    "warning",
                    "bitsandbytes is not installed",
                    "pip install bitsandbytes",
                )
            )

    for host, minimum in MINIMUM.items():
        found = _version(host)
        if found is not None and _version_tuple(found) < minimum:
            add(
                Finding(
                    host,
                    "warning",
                    f"{host} {found} has no HPU support (needs >= {'.'.join(map(str, minimum))})",
                    f"pip install '{host}>={'.'.join(map(str, minimum))}'",
                )
            )

    plugins = collect_plugins()
    if plugins["error"]:
        add(Finding("plugins", "error", plugins["error"]))
    for plugin in plugins["plugins"]:
        if plugin["status"] == "failed":
            add(
                Finding(
                    "plugins",
                    "warning",
                    f"plugin {plugin['name']!r} ({plugin['distribution']}) "
                    f"failed: {plugin['reason']}",
                    f"fix or uninstall {plugin['distribution']}, "
                    f"or HPU_PLUGIN_DISABLE={plugin['name']}",
                )
            )
    errors = sum(f.severity == "error" for f in findings)
    return {
        "ok": errors == 0,
        "errors": errors,
        "warnings": sum(f.severity == "warning" for f in findings),
        "findings": [f.to_dict() for f in findings],
    }


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


# -- for the hosts' `env` commands -----------------------------------------------------------


def gaudi_summary() -> dict[str, str]:
    """The Gaudi section of ``accelerate env`` / ``transformers env``. Never raises, imports
    no torch (it reads ``torch.hpu`` only if torch is already imported)."""
    try:
        from hpu_plugin import activation

        summary = {
            "hpu-plugin version": __version__,
            "Gaudi software": _version(GAUDI_DISTRIBUTION)
            or ("emulated" if _emulation_requested() else "not installed"),
            "hpu-plugin status": f"{activation.state['status']} ({activation.state['reason']})",
            "Gaudi mode": _mode_text(_environ_with_defaults()),
            "HABANA_VISIBLE_MODULES": os.environ.get("HABANA_VISIBLE_MODULES", "unset"),
        }
        if _device_available():
            hpu = _hpu_module()
            summary["Gaudi devices"] = str(hpu.device_count())
            summary["Gaudi generation"] = str(hpu.get_device_name())
        return summary
    except Exception as exc:  # a diagnostic must not break the host's command
        return {"hpu-plugin": f"summary failed: {exc!r}"}


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
    doctor.add_argument(
        "--processes", type=int, default=0, help="check a launch with this many processes per node"
    )
    doctor.add_argument("--compile", action="store_true", help="the job calls torch.compile")
    doctor.add_argument("--dtype", help="the job's precision: bf16, fp16, fp8, fp32")
    doctor.add_argument("--bnb", type=int, choices=(4, 8), help="bitsandbytes bits")
    doctor.add_argument("--bnb-quant-type", default="nf4", help="4-bit type (default nf4)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    commands: dict[str, tuple[Callable[[], dict[str, Any]], Callable[[dict[str, Any]], None]]] = {
        "info": (collect_info, _print_info),
        "devices": (collect_devices, _print_devices),
        "plugins": (collect_plugins, _print_plugins),
        "doctor": (lambda: collect_doctor(args), _print_doctor),
    }
    collect, show = commands[args.command]
    result = collect()
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        show(result)
    if args.command == "doctor":
        return 0 if result["ok"] else 1
    return 0
