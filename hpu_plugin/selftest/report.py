"""The selftest's document (``--json``, ``--report FILE``) and its table, with nothing secret.

Of the environment only settings are reported: the plugin's own and Gaudi's (by their
prefixes, so a misspelt one shows too) and the few other names a Gaudi job reads. Output
tails can still carry what a program printed, so every value of any other environment
variable (8 characters or longer) is replaced by its variable's name wherever it appears in
the document: a token a library echoed, or a home directory in a traceback's paths, becomes
``$NAME``.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from importlib import metadata
from typing import Any

from hpu_plugin.gaudi.software import is_standin
from hpu_plugin.patching import environ_entry, this_process
from hpu_plugin.selftest.runner import Outcome

#: Settings by prefix: the plugin's, Gaudi's software's (``PT_HPU_GPU_MIGRATION`` among them).
DOCUMENTED_PREFIXES = ("HPU_PLUGIN_", "PT_HPU_", "PT_ENABLE_", "HABANA_")
DOCUMENTED = ("HLS_MODULE_ID", "TORCH_DEVICE_BACKEND_AUTOLOAD")
DISTRIBUTIONS = (
    "hpu-plugin", "torch", "transformers", "accelerate", "pluggy", "tokenizers", "safetensors",
    "bitsandbytes", "peft", "deepspeed", "habana-torch-plugin", "habana-torch-dataloader",
    "habana-pyhlml", "optimum-habana",
)
MIN_SCRUB = 8


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in DISTRIBUTIONS:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            found[name] = None
            continue
        # the emulator's own habana-torch-plugin (in its stand-ins) is marked as such
        tops = (dist.read_text("top_level.txt") or "").split()
        emulated = bool(tops) and all(is_standin(str(dist.locate_file(top))) for top in tops)
        found[name] = f"{dist.version} (emulated)" if emulated else dist.version
    return found


def documented(name: str) -> bool:
    return name in DOCUMENTED or name.startswith(DOCUMENTED_PREFIXES)


def documented_environment(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The settings set in ``environ``, but for the defaults activation exported itself:
    the report says what the user set."""
    exported = set(this_process.environment.made) if environ is os.environ else set()
    return {name: value for name, value in sorted(environ.items())
            if documented(name) and environ_entry(name) not in exported}


def scrub(value: Any, environ: Mapping[str, str] = os.environ) -> Any:
    """``value`` (nested dicts, lists, strings) with other variables' values replaced."""
    kept = set(documented_environment(environ).values())
    secrets = sorted(
        ((v, k) for k, v in environ.items()
         if not documented(k) and len(v) >= MIN_SCRUB and v not in kept),
        key=lambda pair: -len(pair[0]),
    )

    def clean(item: Any) -> Any:
        if isinstance(item, str):
            for secret, name in secrets:
                if secret in item:
                    item = item.replace(secret, f"${name}")
            return item
        if isinstance(item, Mapping):
            return {k: clean(v) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return [clean(v) for v in item]
        return item

    return clean(value)


def document(
    outcomes: list[Outcome], probe: dict[str, Any], placement: dict[str, Any],
    exit_status: int, problem: str, seconds: float,
) -> dict[str, Any]:
    """Everything a bug report needs, scrubbed."""
    hl_smi = probe.get("hl_smi", {})
    doc = {
        "exit_status": exit_status,
        "problem": problem,
        "seconds": round(seconds, 1),
        "platform": {"python": platform.python_version(), "system": platform.platform(),
                     "machine": platform.machine(), "cpus": os.cpu_count()},
        "versions": versions(),
        "gaudi": {
            "software": "real" if probe.get("real_gaudi") else
            "emulated" if documented_environment().get("HPU_PLUGIN_EMULATE") else "none",
            "driver": hl_smi.get("version"),
            "devices": hl_smi.get("rows"),
            "hl_smi_problem": hl_smi.get("reason") or None,
        },
        "activation": probe.get("activation"),
        "plugins": probe.get("plugins"),
        "environment": documented_environment(),
        "placement": placement,
        "checks": [o.to_dict() for o in outcomes],
    }
    return scrub(doc)


_LABEL = {"pass": "PASS", "fail": "FAIL", "cannot-run": "CANNOT RUN", "timeout": "TIMEOUT",
          "error": "ERROR"}


def table(doc: Mapping[str, Any], width: int = 140) -> str:
    """The readable summary: one line per check (result, time, one-line reason)."""
    lines = [f"{'check':<20} {'result':<10} {'time':>7}  reason"]
    for check in doc["checks"]:
        reason = " ".join(str(check["reason"]).split())
        room = max(60, width - 41)
        reason = reason if len(reason) <= room else reason[: room - 3] + "..."
        lines.append(
            f"{check['name']:<20} {_LABEL.get(check['status'], check['status']):<10} "
            f"{check['seconds']:>6.1f}s  {reason}"
        )
    counts: dict[str, int] = {}
    for check in doc["checks"]:
        counts[check["status"]] = counts.get(check["status"], 0) + 1
    summary = ", ".join(f"{n} {_LABEL.get(s, s).lower()}" for s, n in counts.items())
    ran = summary or "no check ran"
    lines.append(f"\n{ran} in {doc['seconds']:.0f} s; exit {doc['exit_status']}")
    if doc["problem"]:
        lines.append(doc["problem"])
    return "\n".join(lines)
