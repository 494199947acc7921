"""Each third-party plugin imported in a child process, for ``hpu-plugin doctor``.

A plugin's import runs inside every ``import torch``; one that ends the process
(``os._exit``, a crash in C) or never returns takes ``import torch`` with it, and no guard
in the process can report it. A child can: it imports the plugins one at a time, saying
which it starts and which it finished, so the parent names the one it was in when it died
or stopped answering, then goes on with the others in a new child. The child also names a
plugin that leaves a non-daemon thread running, which keeps every program from exiting.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

from hpu_plugin.gaudi.findings import Finding

#: A plugin whose import in the child takes this many times ``HPU_PLUGIN_IMPORT_BUDGET``
#: (20 s by default) is named as hanging.
HANG_FACTOR = 10
_MARK = "\x00hpu-plugin-import "


def _child(values: list[str]) -> None:
    """In the child: import the plugins whose entry points are ``values``, saying each step."""
    from hpu_plugin.loader import discover, load_plugin, record_for

    for ep in discover():
        record = record_for(ep)
        if record.value not in values:
            continue
        print(_MARK + json.dumps({"start": record.value, "name": record.name,
                                  "dist": record.distribution}), flush=True)
        before = set(threading.enumerate())
        try:
            load_plugin(ep)
        except BaseException:  # the in-process guard reports these; not this probe's
            pass
        threads = [t.name for t in threading.enumerate()
                   if t not in before and t.is_alive() and not t.daemon]
        print(_MARK + json.dumps({"done": record.value, "threads": threads}), flush=True)
    print(_MARK + json.dumps({"end": True}), flush=True)
    sys.stdout.flush()
    os._exit(0)  # a plugin's non-daemon thread must not keep the probe waiting


def _run(values: list[str], limit: float) -> tuple[list[dict[str, Any]], str]:
    """One child's steps, and how it ended: "" (finished), "exit N" or "hang"."""
    env = {**os.environ, "HPU_PLUGIN_DISABLE": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", f"from hpu_plugin.diagnostics.imports import _child; "
         f"_child({values!r})"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=env,
        text=True, errors="replace")
    steps: list[dict[str, Any]] = []
    timer = threading.Timer(limit, proc.kill)
    timer.start()
    started = time.monotonic()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(_MARK):
                steps.append(json.loads(line[len(_MARK):]))
                timer.cancel()
                timer = threading.Timer(limit, proc.kill)
                timer.start()
        code = proc.wait()
    finally:
        timer.cancel()
        proc.kill()
    if steps and steps[-1].get("end"):
        return steps, ""
    hung = code == -9 and time.monotonic() - started >= limit
    return steps, "hang" if hung else f"exit {code}"


def probe_imports() -> tuple[list[Finding], list[str]]:
    """Findings about third-party plugin imports, and the ``HPU_PLUGIN_DISABLE`` values of
    the plugins whose import ends or stops the process (to keep out of ``doctor``'s own
    ``import torch``)."""
    from hpu_plugin.errors import SettingError
    from hpu_plugin.loader import discover, normalise, record_for
    from hpu_plugin.switches import Selection

    try:
        selection = Selection.from_environ()
    except SettingError:  # the activation finding says so; no plugin loads
        return [], []
    limit = HANG_FACTOR * selection.import_budget
    records = [record_for(ep) for ep in discover()]
    values = [r.value for r in records if not r.first_party and not selection.refuses(r)]
    findings: list[Finding] = []
    fatal: list[str] = []
    while values:  # each round names one plugin at most, then goes on without it
        steps, ending = _run(values, limit)
        current: dict[str, Any] = {}
        for step in steps:
            current = step if "start" in step else current
            for thread in step.get("threads", []):
                findings.append(Finding(
                    "plugin-imports", "warning",
                    f"plugin {current['name']!r} ({current['dist']}) leaves the non-daemon "
                    f"thread {thread!r} running after its import: a program that imports "
                    "torch cannot exit while it runs",
                    f"fix or uninstall {current['dist']}, or HPU_PLUGIN_DISABLE="
                    f"{normalise(current['dist'])}:{current['name']}"))
        if not ending or not current or "done" in steps[-1]:
            break
        off = f"{normalise(current['dist'])}:{current['name']}"
        what = (f"does not finish importing within {limit:g} s" if ending == "hang" else
                f"ends the process while it is imported ({ending}): `import torch` stops "
                "there with no message")
        findings.append(Finding("plugin-imports", "error",
                                f"plugin {current['name']!r} ({current['dist']}) {what}",
                                f"fix or uninstall {current['dist']}, or HPU_PLUGIN_DISABLE="
                                f"{off}"))
        fatal.append(off)
        done = {step["done"] for step in steps if "done" in step} | {current["start"]}
        values = [v for v in values if v not in done]
    return findings, fatal
