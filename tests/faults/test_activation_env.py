"""Hostile settings at ``import torch`` with emulation requested: ``import torch`` works;
the plugin is off with one message naming the variable and the fix; the emulator is not
left running; and nothing was exported (no Gaudi defaults reach child processes)."""

from __future__ import annotations

import pytest

from .conftest import activate_each, environ, report, run

PROGRAM = """
import json, os, sys
import torch
from hpu_plugin import activation
print("REPORT " + json.dumps({
    "status": activation.state["status"], "reason": activation.state["reason"],
    "emulator": "hpu_plugin_emulator" in sys.modules,
    "exported": [n for n in ("PT_HPU_LAZY_MODE", "PT_ENABLE_INT64_SUPPORT") if n in os.environ],
    "tensor": torch.ones(2).tolist(),
}))
"""

CASES = {
    "memory 0.5": ({"HPU_PLUGIN_EMULATE_MEMORY": "0.5"}, "HPU_PLUGIN_EMULATE_MEMORY='0.5'"),
    "memory huge": ({"HPU_PLUGIN_EMULATE_MEMORY": "99999999999TiB"}, "HPU_PLUGIN_EMULATE_MEMORY"),
    "memory 400 digits": ({"HPU_PLUGIN_EMULATE_MEMORY": "9" * 400}, "HPU_PLUGIN_EMULATE_MEMORY"),
    "local rank abc": ({"LOCAL_RANK": "abc"}, "LOCAL_RANK='abc'"),
    "local rank arabic digit": ({"LOCAL_RANK": "\u0663"}, "LOCAL_RANK="),
    "world size negative": ({"WORLD_SIZE": "-2"}, "WORLD_SIZE='-2'"),
    "local rank blank": ({"LOCAL_RANK": ""}, "LOCAL_RANK=''"),
    "world size spaces": ({"WORLD_SIZE": "  "}, "WORLD_SIZE='  '"),
    "generation unknown": ({"HPU_PLUGIN_EMULATE": "gaudi4"}, "HPU_PLUGIN_EMULATE='gaudi4'"),
    "generation garbage": ({"HPU_PLUGIN_EMULATE": "maybe"}, "HPU_PLUGIN_EMULATE='maybe'"),
    "devices arabic digit": ({"HPU_PLUGIN_EMULATE_DEVICES": "\u0664"},
                             "HPU_PLUGIN_EMULATE_DEVICES"),
    "import budget": ({"HPU_PLUGIN_IMPORT_BUDGET": "abc"}, "HPU_PLUGIN_IMPORT_BUDGET='abc'"),
    "disable mixes switch": ({"HPU_PLUGIN_DISABLE": "device,1"}, "HPU_PLUGIN_DISABLE="),
    "cache unwritable": ({"HPU_PLUGIN_CACHE_DIR": "/proc/hpu-plugin-cache"},
                         "HPU_PLUGIN_CACHE_DIR"),
}


#: Each in its own ``import torch``; the other cases run activation again in one process.
SEPARATE = ("memory 0.5", "local rank abc")

def _values(case: str) -> dict[str, str]:
    values = {"HPU_PLUGIN_EMULATE": "1", **CASES[case][0]}
    if case == "cache unwritable":
        values["XDG_CACHE_HOME"] = "/proc/hpu-plugin-cache"
    return values


def _check(case: str, result: dict[str, object], messages: list[str]) -> None:
    named = CASES[case][1]
    assert result["status"] == "failed" and result["tensor"] == [1.0, 1.0]
    assert named in str(result["reason"])
    assert result["emulator"] is False, "the emulator must not run while the plugin is off"
    assert result["exported"] == []
    assert len(messages) == 1, messages


@pytest.mark.parametrize("case", SEPARATE)
def test_a_bad_setting_turns_the_plugin_off_cleanly(case):
    done = run(PROGRAM, environ(**_values(case)))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    messages = [line for line in done.stderr.splitlines() if line.startswith("hpu_plugin:")]
    _check(case, report(done), messages)


@pytest.fixture(scope="module")
def batch() -> dict[str, dict[str, object]]:
    cases = {case: _values(case) for case in CASES if case not in SEPARATE}
    return activate_each(cases)


@pytest.mark.parametrize("case", [case for case in CASES if case not in SEPARATE])
def test_a_bad_setting_is_refused_at_activation(batch, case):
    _check(case, batch[case], batch[case]["messages"])  # type: ignore[arg-type]


def test_autoload_off_leaves_no_standins_behind():
    """``TORCH_DEVICE_BACKEND_AUTOLOAD=0``: nothing starts the emulator, so nothing may look
    like Gaudi: the hosts' checks answer no, without ImportError, after one log line."""
    done = run("""
        import json, importlib.util
        import torch
        from transformers import TrainingArguments
        from transformers.utils import is_torch_hpu_available
        from accelerate import Accelerator
        out = {"hpu": is_torch_hpu_available(), "device": str(Accelerator(cpu=False).device),
               "args": str(TrainingArguments(output_dir="/tmp/x", report_to=[]).device),
               "standins": importlib.util.find_spec("habana_frameworks") is not None}
        print("REPORT " + json.dumps(out))
    """, environ(HPU_PLUGIN_EMULATE="1", TORCH_DEVICE_BACKEND_AUTOLOAD="0"), timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert report(done) == {"hpu": False, "device": "cpu", "args": "cpu", "standins": False}
    lines = [line for line in done.stderr.splitlines() if "TORCH_DEVICE_BACKEND_AUTOLOAD" in line]
    assert len(lines) == 1 and "unset" in lines[0]


def test_free_memory_is_never_negative():
    done = run("""
        import json, torch
        before = torch.hpu.mem_get_info()
        held = [torch.empty(1024 * 1024, dtype=torch.uint8, device="hpu") for _ in range(3)]
        during = torch.hpu.mem_get_info()
        try:
            held.append(torch.empty(8 * 1024 * 1024, dtype=torch.uint8, device="hpu"))
            refused = False
        except RuntimeError:
            refused = True
        print("REPORT " + json.dumps({"before": before, "during": during,
                                      "after": torch.hpu.mem_get_info(), "refused": refused}))
    """, environ(HPU_PLUGIN_EMULATE="1", HPU_PLUGIN_EMULATE_MEMORY="4MiB"))
    assert done.returncode == 0, done.stderr[-2000:]
    result = report(done)
    assert result["refused"] is True
    for free, total in (result["before"], result["during"], result["after"]):
        assert 0 <= free <= total == 4 * 1024 * 1024


ADAPTER_FAULT = """
import json, sys
from hpu_plugin.hosts import sentence_transformers_adapter

def fault(*args, **kwargs):
    raise RuntimeError("an adapter's fault")

sentence_transformers_adapter.install = fault  # the last adapter installed fails
import torch
import transformers.trainer
import accelerate.optimizer
from hpu_plugin import hosts
from hpu_plugin.patching import is_ours, this_process
print("REPORT " + json.dumps({
    "installed": hosts.installed(), "made": len(this_process.hosts.made),
    "ours": [is_ours(vars(transformers.TrainingArguments)["__post_init__"]),
             is_ours(vars(accelerate.optimizer.AcceleratedOptimizer)["__init__"]),
             is_ours(vars(transformers.trainer.Trainer)["_inner_training_loop"])],
    "out": dict(this_process.stayed_out),
    "tensor": torch.ones(2).tolist(),
}))
"""


def test_a_failing_adapter_leaves_every_adapter_off_also_for_hosts_imported_later():
    done = run(ADAPTER_FAULT, environ(HPU_PLUGIN_EMULATE="1"), timeout=300)
    result = report(done)
    assert result["tensor"] == [1.0, 1.0], result
    assert "installing the host adapters failed; they are off" in done.stderr, done.stderr
    # what it says is what it did: nothing patched, now or when Transformers and
    # Accelerate are imported after import torch
    assert result["installed"] is False and result["made"] == 0, result
    assert result["ours"] == [False, False, False], result
    # and info says that, alone: not what stayed out of the partial installation
    assert list(result["out"]) == ["hpu_plugin host adapters"], result
    assert "an adapter's fault" in result["out"]["hpu_plugin host adapters"], result
