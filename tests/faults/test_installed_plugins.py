"""Installed third-party plugins that misbehave, in real programs on the emulator.

The promise for each: ``import torch`` works and the emulated Gaudi is active; the
program reaches its end (the decision falls to the next plugin); the fault is reported
once, naming the plugin, its distribution and the ``HPU_PLUGIN_DISABLE`` value that turns
it off; nothing hangs (every run is bounded by a subprocess timeout). An import no process
can survive (it never returns, or ends the process) is named by ``hpu-plugin doctor``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
from extensions.conftest import NEUTRAL_CWD

from .conftest import (
    FATAL_IMPORTS,
    FAULT_DIST,
    HOOK_FAULTS,
    IMPORT_FAULTS,
    KEEP_LOGS,
    NAMES_DIST,
    environ,
    report,
    run,
)

#: A user's program: import torch, use the device, ask every decision, report.
PROGRAM = """
import json, os, sys
import torch
from hpu_plugin import activation
from hpu_plugin.registry import get_registry
case = os.environ["HPU_FAULT_CASE"]
out = {"activation": activation.state.get("status")}
out["tensor"] = (torch.ones(2, device="hpu") * 3).cpu().tolist()
if "compile" in case:
    fn = torch.compile(lambda x: x + 1)
    out["compiled"] = fn(torch.ones(2, device="hpu")).cpu().tolist()
    again = torch.compile(lambda x: x * 3)  # and the next torch.compile works too
    out["compiled_again"] = again(torch.ones(2, device="hpu")).cpu().tolist()
if "ddp" in case:
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29600 + os.getpid() % 300))
    dist.init_process_group(world_size=1, rank=0)
    out["backend"] = dist.get_backend()
    dist.destroy_process_group()
record = get_registry().records[case]
out.update(status=record.status, reason=record.reason, seconds=record.import_seconds)
out["lazy_mode"] = os.environ.get("PT_HPU_LAZY_MODE")
print("REPORT " + json.dumps(out))
"""


def _run_case(case: str, **extra: str) -> tuple[dict[str, object], str]:
    env = environ(HPU_PLUGIN_EMULATE="1", HPU_FAULT_CASE=case, HPU_PLUGIN_IMPORT_BUDGET="1",
                  **extra)
    done = run(PROGRAM, env, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return report(done), done.stderr


def _assert_reported_once(stderr: str, case: str) -> None:
    lines = [line for line in stderr.splitlines() if f"plugin {case!r}" in line]
    assert len(lines) == 1, stderr[-3000:]
    assert FAULT_DIST in lines[0] and f"HPU_PLUGIN_DISABLE={FAULT_DIST}:{case}" in lines[0]


#: Import faults run each in its own ``import torch``; the others in one process that
#: loads the plugins again per case, as ``import torch`` does (cheaper; same registry path).
SEPARATE = ("imp_exit",)
#: Reported but loaded: a slow import and one that leaves a thread running.
LOADED = ("imp_slow", "imp_thread")

BATCH = KEEP_LOGS + """
import json, os, sys
import torch
from hpu_plugin.registry import Registry
from hpu_plugin.switches import Selection
results = {}
for case in sys.argv[1:]:
    os.environ["HPU_FAULT_CASE"] = case
    sys.modules.pop("hpu_fault_plugins." + case, None)
    del lines[:]
    registry = Registry(Selection.from_environ())
    registry.load_entry_points()
    record = registry.records[case]
    results[case] = {"status": record.status, "reason": record.reason,
                     "seconds": record.import_seconds,
                     "reports": [line for line in lines if f"plugin {case!r}" in line]}
results["tensor"] = (torch.ones(2, device="hpu") * 3).cpu().tolist()
print("REPORT " + json.dumps(results))
"""


@pytest.fixture(scope="module")
def batch(fault_plugins) -> dict[str, object]:
    cases = [case for case in sorted(IMPORT_FAULTS) if case not in SEPARATE]
    env = environ(HPU_PLUGIN_EMULATE="1", HPU_PLUGIN_IMPORT_BUDGET="1")
    done = run(BATCH.replace("sys.argv[1:]", repr(cases)), env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return report(done)


def _check_import_fault(case: str, result: dict[str, object]) -> None:
    if case == "imp_slow":  # measured and reported, never interrupted
        assert float(result["seconds"]) >= 1.5 and "to import" in str(result["reason"]), result
    elif case == "imp_thread":
        assert "non-daemon thread" in str(result["reason"]), result
    if case in LOADED:
        assert result["status"] == "faulted", result
    else:
        assert result["status"] == "failed", result
    assert len(str(result["reason"])) < 1000, result  # a 100 kB message is cut


@pytest.mark.parametrize("case", SEPARATE)
def test_import_fault_leaves_torch_and_the_device_working(fault_plugins, case):
    result, stderr = _run_case(case)
    assert result["activation"] == "active" and result["tensor"] == [3.0, 3.0]
    _check_import_fault(case, result)
    _assert_reported_once(stderr, case)


@pytest.mark.parametrize("case", [c for c in sorted(IMPORT_FAULTS) if c not in SEPARATE])
def test_import_fault_is_contained(batch, case):
    result = batch[case]
    _check_import_fault(case, result)
    assert len(result["reports"]) == 1, result
    assert f"HPU_PLUGIN_DISABLE={FAULT_DIST}:{case}" in result["reports"][0]
    assert batch["tensor"] == [3.0, 3.0]  # and the device works after all of them


@pytest.mark.parametrize("case", sorted(HOOK_FAULTS))
def test_hook_fault_leaves_the_program_running(fault_plugins, case):
    result, stderr = _run_case(case)
    assert result["activation"] == "active" and result["tensor"] == [3.0, 3.0]
    assert result["status"] == "faulted", result
    if "compile" in case:
        assert result["compiled"] == [2.0, 2.0] and result["compiled_again"] == [3.0, 3.0]
    if "ddp" in case:
        assert result["backend"] == "hccl"
    if case == "compile_recursion":  # reached itself through torch.compile: skipped inside
        assert "again from inside its own hpu_compile_backend" in stderr, stderr[-3000:]
        assert "Traceback" not in stderr, stderr[-3000:]
    else:
        _assert_reported_once(stderr, case)


def test_a_plugin_default_the_settings_refuse_turns_the_plugin_off_before_work(
        fault_plugins):
    """A default set by a plugin's hpu_prepare_environment is checked as the user's own
    setting is: refused at activation, not deep inside train() or generate()."""
    env = environ(HPU_PLUGIN_EMULATE="1", HPU_FAULT_CASE="environ_bad_default")
    done = run("""
        import json, os, torch
        from hpu_plugin import activation
        print("REPORT " + json.dumps({
            "status": activation.state["status"], "reason": activation.state["reason"],
            "exported": [n for n in ("HPU_PLUGIN_FAST", "PT_HPU_LAZY_MODE") if n in os.environ],
            "hpu": hasattr(torch, "hpu") and torch.hpu.is_available(),
            "tensor": torch.ones(2).tolist()}))
    """, env)
    result = report(done)
    assert result["status"] == "failed" and result["tensor"] == [1.0, 1.0], result
    assert "hpu_prepare_environment" in result["reason"], result
    assert "HPU_PLUGIN_FAST='maybe'" in result["reason"], result
    assert result["exported"] == [] and result["hpu"] is False, result


def test_a_plugin_import_that_breaks_importing_is_taken_back(fault_plugins):
    """A plugin whose import adds a finder that raises for every later import ends
    activation failed; what it added to the import system goes with the plugin, so
    ``import torch`` and the program's own imports still work."""
    env = environ(HPU_PLUGIN_EMULATE="1", HPU_FAULT_CASE="imp_broken_finder")
    done = run("""
        import json, torch
        import email.mime.text  # the program's own imports after import torch
        from hpu_plugin import activation
        print("REPORT " + json.dumps({"status": activation.state["status"],
                                      "reason": activation.state["reason"],
                                      "tensor": torch.ones(2).tolist()}))
    """, env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = report(done)
    assert result["status"] == "failed" and "broken finder" in result["reason"], result
    assert result["tensor"] == [1.0, 1.0]
    assert "could not take back" not in done.stderr, done.stderr[-3000:]


def test_plugin_importing_torch_inside_import_torch_is_not_cut_off(fault_plugins):
    """A healthy plugin that imports torch at its top loads normally (its import runs on
    torch's own thread, so it never waits on torch's module lock), and healthy plugins
    without hooks all register, quietly."""
    env = environ(HPU_PLUGIN_EMULATE="1", HPU_FAULT_CASE="none", HPU_PLUGIN_IMPORT_BUDGET="1")
    done = run("""
        import json, torch
        from hpu_plugin.registry import get_registry
        records = get_registry().records
        print("REPORT " + json.dumps({n: [records[n].status, records[n].first_party]
                                      for n in ("imports_torch", "device", "no_hooks_a",
                                                "no_hooks_b")}))
    """, env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert report(done) == {"imports_torch": ["enabled", False], "device": ["enabled", True],
                            "no_hooks_a": ["enabled", False], "no_hooks_b": ["enabled", False]}
    assert "already registered" not in done.stderr and len(done.stderr) < 3000


@pytest.fixture(scope="module")
def doctor_with_fatal_imports(fault_plugins) -> tuple[dict[str, object], str]:
    """``hpu-plugin doctor`` with every fatal import active at once: it must name each and
    still check the rest, with those plugins kept out of its own ``import torch``."""
    env = environ(HPU_PLUGIN_EMULATE="1", HPU_FAULT_CASE=",".join(FATAL_IMPORTS),
                  HPU_PLUGIN_IMPORT_BUDGET="0.3",
                  HPU_PLUGIN_DISABLE=f"{NAMES_DIST}:imports_torch")
    done = run("from hpu_plugin.cli import main; import sys; sys.exit(main(['doctor', "
               "'--json']))", env, timeout=240)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return json.loads(done.stdout), done.stderr


@pytest.mark.parametrize("case", sorted(FATAL_IMPORTS))
def test_doctor_names_an_import_no_process_survives(doctor_with_fatal_imports, case):
    result, _ = doctor_with_fatal_imports
    named = [f for f in result["findings"]
             if f["check"] == "plugin-imports" and f"plugin {case!r}" in f["message"]]
    assert len(named) == 1 and named[0]["severity"] == "error", result["findings"]
    how = "does not finish importing" if case in ("imp_loop", "imp_torch_then_hang") \
        else "ends the process"
    assert how in named[0]["message"], named
    assert f"HPU_PLUGIN_DISABLE={FAULT_DIST}:{case}" in named[0]["fix"]
    assert result["errors"] >= len(FATAL_IMPORTS)
    # doctor's own import torch went on without them: the plugin activated
    assert not [f for f in result["findings"] if f["check"] == "activation"], result


JOB = """
import os
import sys
import torch
import torch.distributed as dist
dist.init_process_group()
dist.all_reduce(torch.ones(1, device="hpu"))
sys.stdout.write(f"rank {os.environ['RANK']} done\\n")  # one write: the ranks share a pipe
sys.stdout.flush()
dist.destroy_process_group()
"""


def test_facts_that_are_not_text_end_no_rank_of_a_job(fault_plugins, tmp_path):
    """``hpu_job_facts`` answering ``{"x": object()}``: refused by the guard (its items are
    checked, not only its type), so the pre-flight check publishes the others' facts and
    both ranks of a 2-rank job finish."""
    script = tmp_path / "job.py"
    script.write_text(JOB)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         "--monitor_interval", "0.5", str(script)],
        env=environ(HPU_PLUGIN_EMULATE="1", HPU_PLUGIN_EMULATE_DEVICES="2",
                    HPU_FAULT_CASE="facts_object"),
        capture_output=True, text=True, timeout=240, cwd=tmp_path)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "rank 0 done" in output and "rank 1 done" in output
    reports = [line for line in done.stderr.splitlines() if "plugin 'facts_object'" in line]
    assert reports and all(f"HPU_PLUGIN_DISABLE={FAULT_DIST}:facts_object" in r for r in reports)


def test_an_import_that_never_returns_is_named_while_it_hangs(fault_plugins):
    """``import torch`` cannot go on past such an import, but it says which plugin it waits
    for and the switch that skips it; with that switch the same program runs."""
    off = f"HPU_PLUGIN_DISABLE={FAULT_DIST}:imp_loop"
    env = environ(HPU_PLUGIN_EMULATE="1", HPU_FAULT_CASE="imp_loop",
                  HPU_PLUGIN_IMPORT_BUDGET="0.5")
    proc = subprocess.Popen([sys.executable, "-c", "import torch"], env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            cwd=NEUTRAL_CWD)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")),
                              daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 180
        while not any("still importing" in line for line in lines):
            assert proc.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, "".join(lines)
            time.sleep(0.2)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    line = next(line for line in lines if "still importing" in line)
    assert "'imp_loop'" in line and FAULT_DIST in line and off in line, line
    done = run("import torch; from hpu_plugin import activation; "
               "print(activation.state['status'])", {**env, **dict([off.split("=", 1)])})
    assert done.returncode == 0 and done.stdout.strip() == "active", done.stderr[-2000:]
    assert "still importing" not in done.stderr
