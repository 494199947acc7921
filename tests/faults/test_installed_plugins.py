"""Installed third-party plugins that misbehave, in real programs on the emulator.

The promise for each: ``import torch`` works and the emulated Gaudi is active; the
program reaches its end (the decision falls to the next plugin); the fault is reported
once, naming the plugin, its distribution and the ``HPU_PLUGIN_DISABLE`` value that turns
it off; nothing hangs (every run is bounded by a subprocess timeout).
"""

from __future__ import annotations

import pytest

from .conftest import FAULT_DIST, HOOK_FAULTS, IMPORT_FAULTS, environ, report, run

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
SEPARATE = ("imp_exit", "imp_sleep_forever", "imp_torch_then_hang")
HANGS = ("imp_sleep_forever", "imp_slow", "imp_loop", "imp_swallows", "imp_torch_then_hang",
         "imp_thread_hang")

BATCH = """
import json, logging, os, sys
import torch
from hpu_plugin.registry import Registry, Selection
lines = []
class Keep(logging.Handler):
    def emit(self, record):
        lines.append(record.getMessage())
logging.getLogger("hpu_plugin").addHandler(Keep())
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
    assert result["status"] == "failed", result
    if case in HANGS:
        # cut off at the budget (1 s), not waited for: the plugin would take 30 s or forever
        assert "cut off" in str(result["reason"]) and float(result["seconds"]) < 30, result


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
        assert result["compiled"] == [2.0, 2.0]
    if "ddp" in case:
        assert result["backend"] == "hccl"
    _assert_reported_once(stderr, case)


def test_plugin_importing_torch_inside_import_torch_is_not_cut_off(fault_plugins):
    """A healthy plugin that imports torch at its top loads normally: the budget does not
    make its import wait on torch's module lock (the import runs on torch's own thread)."""
    env = environ(HPU_PLUGIN_EMULATE="1", HPU_FAULT_CASE="none", HPU_PLUGIN_IMPORT_BUDGET="1")
    done = run("""
        import json, torch
        from hpu_plugin.registry import get_registry
        records = get_registry().records
        print("REPORT " + json.dumps({n: [records[n].status, records[n].first_party]
                                      for n in ("imports_torch", "device")}))
    """, env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert report(done) == {"imports_torch": ["enabled", False], "device": ["enabled", True]}
