"""``hpu-plugin doctor``: every rule of ``hpu_plugin.gaudi``, one small function each.

A rule takes the :class:`Doctor` (the environment, the job asked about, and the facts the
rules before it found) and returns its findings. Rules run in :data:`RULES` order; a rule
that learns a fact later rules need (the device map, the generation) records it on the
doctor. Adding a rule: write a function here, add it to :data:`RULES`, test its finding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hpu_plugin import settings
from hpu_plugin.diagnostics import inventory
from hpu_plugin.gaudi.config_error import GaudiConfigError
from hpu_plugin.gaudi.findings import Finding
from hpu_plugin.gaudi.generations import DTYPE_NAMES as DTYPE_NAMES  # the CLI's --dtype
from hpu_plugin.gaudi.generations import Generation


@dataclass
class Job:
    """What the user said about the job (``doctor``'s options); zero/None: not said."""

    processes: int = 0
    compile: bool = False
    dtype: str | None = None
    bnb: int | None = None
    bnb_quant_type: str = "nf4"


@dataclass
class Doctor:
    """The inputs of the rules, and the facts found so far."""

    environ: dict[str, str]
    job: Job
    activation: dict[str, str] = field(default_factory=dict)
    env_ok: bool = True
    index_map: dict[int, int] | None = None
    names: list[str] = field(default_factory=list)
    generation: Generation | None = None

    @property
    def present(self) -> bool:
        """A device is there: hl-smi lists one, or torch.hpu has one ready."""
        return bool(self.index_map) or inventory.device_available()

    @property
    def failed(self) -> str:
        """Why activation failed ("" when it did not)."""
        if self.activation.get("status") != "failed":
            return ""
        return self.activation.get("reason", "") or "failed"


# -- the rules, in order ---------------------------------------------------------------------


def check_gaudi(doctor: Doctor) -> list[Finding]:
    if inventory.gaudi_expected():
        return []
    return [Finding("gaudi", "info", inventory.no_gaudi_reason())]


def check_activation(doctor: Doctor) -> list[Finding]:
    activation = doctor.activation
    if activation.get("status") != "failed":
        return []
    return [
        Finding(
            "activation",
            "error",
            f"the plugin failed to activate: {activation['reason']}",
            "see the reason; HPU_PLUGIN_DISABLE=1 turns the plugin off meanwhile",
        )
    ]


def check_variables(doctor: Doctor) -> list[Finding]:
    """Each Gaudi variable parses; ``HABANA_VISIBLE_DEVICES`` only warns (it is read at
    ``docker run``, not by the process)."""
    from hpu_plugin import machine
    from hpu_plugin.gaudi import environment, migration, tuning, visibility

    environ = doctor.environ
    parsers: list[tuple[str, Callable[[], object]]] = [
        ("HABANA_VISIBLE_MODULES", lambda: visibility.visible_modules(environ)),
        ("HABANA_VISIBLE_DEVICES", lambda: visibility.visible_devices(environ)),
        ("HLS_MODULE_ID", lambda: visibility.parse_module_id(environ.get("HLS_MODULE_ID"))),
        ("HPU_PLUGIN_HLSMI_TIMEOUT", machine.default_timeout),
        ("PT_HPU_LAZY_MODE", lambda: environment.parse_lazy_mode(environ.get("PT_HPU_LAZY_MODE"))),
        (
            "PT_ENABLE_INT64_SUPPORT",
            lambda: environment.parse_int64_support(environ.get("PT_ENABLE_INT64_SUPPORT")),
        ),
        (migration.VARIABLE, lambda: migration.requested(environ)),
    ]
    findings = []
    for name, parse in parsers:
        try:
            parse()
        except GaudiConfigError as exc:
            if name == "HABANA_VISIBLE_DEVICES":
                findings.append(Finding(name, "warning", str(exc), exc.fix, name, str(exc.value)))
                continue
            doctor.env_ok = False
            findings.append(exc.as_finding(name))
    # The fast paths' and shape buckets' settings: each bad one is an error with its fix
    # (activation refuses them); they say nothing about the devices, so env_ok stays.
    findings += [GaudiConfigError.from_setting(fault).as_finding(fault.variable)
                 for fault in tuning.faults(environ)]
    return findings


def check_hlsmi(doctor: Doctor) -> list[Finding]:
    """``hl-smi`` maps device indices to module ids; records the map and device names."""
    from hpu_plugin.gaudi import hlsmi

    answer = inventory.query_hlsmi(("index", "module_id", "name"))
    if answer.rows is None and not answer.missing and not answer.timed_out:
        answer = inventory.query_hlsmi(hlsmi.INDEX_MODULE_FIELDS)
    if answer.missing and not inventory.gaudi_expected():
        return []
    if answer.rows is None:
        return [_hlsmi_unanswered(doctor, answer.reason)]
    try:
        doctor.index_map = hlsmi.rows_to_index_module_map(answer.rows)
    except hlsmi.HlSmiError as exc:
        return [Finding("hl-smi", "warning", str(exc), "check the Gaudi driver installation")]
    doctor.names = [row["name"] for row in answer.rows if row.get("name")]
    modules = ",".join(map(str, sorted(doctor.index_map.values()))) or "none"
    return [Finding("hl-smi", "ok", f"{len(doctor.index_map)} device(s), module ids {modules}")]


def _hlsmi_unanswered(doctor: Doctor, reason: str) -> Finding:
    message = f"cannot map device indices to module ids: {reason}"
    if not (inventory.emulation_requested() and not inventory.gaudi_software()):
        return Finding("hl-smi", "warning", message, "install the Gaudi driver tools (hl-smi)")
    if doctor.failed:  # the emulator puts its hl-smi on PATH when it starts; it did not
        return Finding("hl-smi", "info", f"{message} (the emulator did not start, see above)")
    return Finding(
        "hl-smi",
        "warning",
        message,
        "the emulator's hl-smi is `python -m hpu_emulator.fake_hlsmi`; it is put on PATH "
        "(under ~/.cache/hpu_plugin) when the emulator starts: check that folder is writable",
    )


def check_generation(doctor: Doctor) -> list[Finding]:
    """The generation, from hl-smi's names or ``torch.hpu``; records it."""
    from hpu_plugin.gaudi import generations

    name = doctor.names[0] if doctor.names else inventory.device_name()
    doctor.generation = generations.generation_from_name(name) if name else None
    generation = doctor.generation
    if generation is None:
        return []
    features = ("fp16", "fp8", "int64", "bitsandbytes")
    supported = "".join(f", {f}" for f in features if generation.supports(f))
    return [Finding("generation", "ok", f"{generation.name}: bf16{supported}")]


def check_software(doctor: Doctor) -> list[Finding]:
    """Do the Gaudi software, its torch, the driver and the firmware belong to one release
    (``gaudi.releases``)? On the emulator: which release it emulates."""
    from hpu_plugin.gaudi import releases
    from hpu_plugin.gaudi.software import GAUDI_DISTRIBUTION

    bridge = inventory.version(GAUDI_DISTRIBUTION)
    if not inventory.gaudi_software():
        if not inventory.emulation_requested() or bridge is None:
            return []
        return [Finding(
            "gaudi-software", "info",
            f"emulated Gaudi software {releases.software_release(bridge) or bridge} (the "
            f"bridge release the emulator follows), on the torch installed here "
            f"({inventory.version('torch')}): the emulator runs on every torch hpu-plugin "
            "supports, so the release's own torch is not required",
        )]
    answer = inventory.query_hlsmi(("driver_version",))
    rows = answer.rows or []
    driver = rows[0].get("driver_version") if rows else None
    generation = doctor.generation.name if doctor.generation is not None else None
    from hpu_plugin import machine

    firmware = machine.firmware_version(machine.default_timeout()) if answer.rows else None
    return releases.check(bridge, inventory.version("torch"), driver, generation, firmware)


def check_visible_devices(doctor: Doctor) -> list[Finding]:
    """``HABANA_VISIBLE_DEVICES`` outside ``docker run`` selects nothing."""
    from hpu_plugin.gaudi import visibility

    raw = doctor.environ.get("HABANA_VISIBLE_DEVICES")
    index_map = doctor.index_map
    if raw is None or index_map is None or not doctor.env_ok:
        return []
    try:
        listed = visibility.visible_devices(doctor.environ)
    except GaudiConfigError:
        return []
    if listed is None or len(index_map) <= len(listed):
        return []
    return [
        Finding(
            "HABANA_VISIBLE_DEVICES",
            "warning",
            f"HABANA_VISIBLE_DEVICES={raw!r} lists {len(listed)} device(s) but "
            f"{len(index_map)} are visible: it only works at `docker run --runtime=habana`",
            f"select devices with HABANA_VISIBLE_MODULES (module ids: "
            f"{','.join(str(index_map[i]) for i in listed if i in index_map)})",
            "HABANA_VISIBLE_DEVICES",
            raw,
        )
    ]


def check_devices(doctor: Doctor) -> list[Finding]:
    """The job's processes get valid devices (group size, module ids, one per process)."""
    from hpu_plugin.gaudi import selection, visibility

    if not doctor.env_ok:
        return []
    environ, findings = doctor.environ, []
    job = None
    try:
        job = selection.job_from_environ(environ)
    except GaudiConfigError as exc:
        findings.append(exc.as_finding("launcher"))
    modules = visibility.visible_modules(environ)
    asked = doctor.job.processes
    processes = asked or (job[1] if job else len(modules) if modules else 0)
    if job is None or asked:
        job = (processes, processes, 0) if processes > 1 else (1, 1, 0)
    try:
        placement = selection.check_distributed_job(environ, *job, doctor.index_map)
    except GaudiConfigError as exc:
        return [*findings, exc.as_finding("devices")]
    ids = f", module ids {','.join(map(str, placement.modules))}" if placement.modules else ""
    findings.append(Finding("devices", "ok", f"{placement.group}{ids}"))
    findings += [Finding("devices", "warning", warning) for warning in placement.warnings]
    return findings


def check_mode(doctor: Doctor) -> list[Finding]:
    """Lazy or eager; ``torch.compile`` needs eager (an error with ``--compile``)."""
    from hpu_plugin.gaudi import modes

    if not doctor.env_ok:
        return []
    environ = doctor.environ
    try:
        mode = modes.mode(environ)
    except GaudiConfigError as exc:
        return [exc.as_finding("mode")]
    text = inventory.mode_text(environ)
    if mode.compile:
        return [Finding("mode", "ok", f"{text}: torch.compile uses hpu_backend")]
    try:
        modes.check_compile(environ)
    except GaudiConfigError as exc:
        severity = "error" if doctor.job.compile else "warning"
        lazy = environ.get("PT_HPU_LAZY_MODE")
        return [Finding("mode", severity, f"{text}: {exc}", exc.fix, "PT_HPU_LAZY_MODE", lazy)]
    return []


def check_int64(doctor: Doctor) -> list[Finding]:
    from hpu_plugin.gaudi import generations

    if not doctor.env_ok:
        return []
    return generations.int64_findings(doctor.generation, doctor.environ)


def check_dtype(doctor: Doctor) -> list[Finding]:
    from hpu_plugin.gaudi import generations

    dtype, generation = doctor.job.dtype, doctor.generation
    if not dtype:
        return []
    if generation is None:
        return [Finding("dtype", "info", f"{dtype}: generation unknown, not checked")]
    try:
        generations.check_dtype(generation, dtype, "--dtype")
    except GaudiConfigError as exc:
        return [exc.as_finding("dtype")]
    return [Finding("dtype", "ok", f"{dtype} on {generation.name}")]


def check_bitsandbytes(doctor: Doctor) -> list[Finding]:
    from hpu_plugin.gaudi import generations

    job = doctor.job
    if not job.bnb:
        return []
    try:
        findings = generations.bitsandbytes_findings(doctor.generation, job.bnb, job.bnb_quant_type)
    except GaudiConfigError as exc:
        findings = [exc.as_finding("bitsandbytes")]
    if inventory.version("bitsandbytes") is None:
        missing = "bitsandbytes is not installed"
        findings.append(Finding("bitsandbytes", "warning", missing, "pip install bitsandbytes"))
    return findings


def check_hosts(doctor: Doctor) -> list[Finding]:
    """Are torch, Transformers and Accelerate tested releases; did an adapter stay out?"""
    from hpu_plugin.diagnostics import host_releases

    found = host_releases.findings(host_releases.report())
    # An "ok" only where the plugin is at work: otherwise the first thing to read is why not.
    active = doctor.activation.get("status") == "active"
    return [f for f in found if f.severity != "ok" or active]


def check_gpu_migration(doctor: Doctor) -> list[Finding]:
    """Is Intel's GPU Migration Toolkit on, and can the plugin honour it?"""
    from hpu_plugin.diagnostics.plugins import collect_plugins
    from hpu_plugin.gaudi import migration

    state = migration.state(doctor.environ)
    if state in ("off", "invalid"):  # invalid: the environment check names the value
        return []
    name = migration.VARIABLE
    if state == "requested":
        return [Finding(
            "gpu migration", "warning",
            f"{name} is set but the toolkit is not loaded: the Gaudi software was imported "
            "before the variable was set, so CUDA calls are not mapped",
            f"export {name}=1 before starting Python", name, doctor.environ.get(name),
        )]
    plugin = {p["name"]: p for p in collect_plugins()["plugins"]}.get("gpu_migration")
    if plugin is None or plugin["status"] != "enabled":
        return [Finding(
            "gpu migration", "warning",
            "the toolkit is loaded but the gpu_migration plugin is not enabled: "
            "init_process_group('nccl') is refused instead of run as hccl",
            "enable it (remove gpu_migration from HPU_PLUGIN_DISABLE / add it to "
            "HPU_PLUGIN_ONLY)",
        )]
    return [Finding("gpu migration", "ok",
                    "loaded: CUDA calls map to hpu, nccl runs as hccl, inductor as hpu_backend")]


def check_plugins(doctor: Doctor) -> list[Finding]:
    from hpu_plugin.diagnostics.plugins import collect_plugins

    plugins = collect_plugins()
    if plugins["error"]:
        return [Finding("plugins", "error", plugins["error"])]
    return [
        Finding(
            "plugins",
            "warning",
            f"plugin {p['name']!r} ({p['distribution']}) {p['status']}: {p['reason']}",
            f"fix or uninstall {p['distribution']}"
            + (f", or HPU_PLUGIN_DISABLE={p['disable_with']}" if p["disable_with"] else ""),
        )
        for p in plugins["plugins"]
        if p["status"] in ("failed", "faulted")
    ]


RULES: tuple[Callable[[Doctor], list[Finding]], ...] = (
    check_gaudi,
    check_activation,
    check_variables,
    check_hlsmi,
    check_generation,
    check_software,
    check_visible_devices,
    check_devices,
    check_mode,
    check_int64,
    check_dtype,
    check_bitsandbytes,
    check_hosts,
    check_gpu_migration,
    check_plugins,
)


#: Rules about the device itself: they cannot be "ok" for a device that is absent, and
#: after a failed activation their verdicts would repeat or contradict its reason.
DEVICE_CHECKS = frozenset({"generation", "devices", "mode", "int64", "dtype"})


def _credible(doctor: Doctor, finding: Finding) -> bool:
    """Never ok for an absent device; after a failed activation, its error says it once."""
    if finding.check in DEVICE_CHECKS:
        if finding.severity == "ok" and not doctor.present:
            return False
        if doctor.failed and finding.severity != "error":
            return False
    if doctor.failed and finding.check != "activation" and finding.severity == "error":
        return finding.message not in doctor.failed and doctor.failed not in finding.message
    return True


def collect_doctor(job: Job) -> dict[str, Any]:
    """Run every rule; ``ok`` is false when any finding is an error.

    Third-party plugins are first imported in a child (:mod:`.imports`): one whose import
    ends or stops the process is named, and kept out of this process's own ``import torch``
    so that the other rules still run.
    """
    import os

    from hpu_plugin.diagnostics.imports import probe_imports

    first, fatal = probe_imports()
    if fatal:
        listed = os.environ.get("HPU_PLUGIN_DISABLE", "")
        listed = "" if settings.is_off(listed) else listed
        os.environ["HPU_PLUGIN_DISABLE"] = ",".join(filter(None, [listed, *fatal]))
    activation = inventory.import_torch()
    # after activation: the environment then holds the plugin's defaults
    doctor = Doctor(inventory.environ_with_defaults(), job, activation)
    findings = first + [f for rule in RULES for f in rule(doctor) if _credible(doctor, f)]
    errors = sum(f.severity == "error" for f in findings)
    return {
        "ok": errors == 0,
        "errors": errors,
        "warnings": sum(f.severity == "warning" for f in findings),
        "findings": [f.to_dict() for f in findings],
    }
