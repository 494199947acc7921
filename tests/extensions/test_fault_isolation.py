"""Fault injection on the emulator: a broken third-party plugin is reported once, by name,
distribution, version and exception, and ``import torch``, ``import transformers`` and a
tiny Trainer run still work, on ``hpu`` (the decision fell to the next implementation)."""

from __future__ import annotations

import json

import pytest

from .conftest import clean_environ, run_python, write_plugin

pytestmark = pytest.mark.e2e

TINY_TRAINER = """
import json, sys
import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

torch.manual_seed(0)
config = LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, intermediate_size=128, vocab_size=1000)
model = LlamaForCausalLM(config)
rows = [{"input_ids": ids, "labels": ids}
        for ids in torch.randint(0, 1000, (8, 16)).unbind(0)]
args = TrainingArguments(output_dir=sys.argv[1], max_steps=2, per_device_train_batch_size=2,
                         report_to=[], save_strategy="no", logging_strategy="no")
result = Trainer(model=model, args=args, train_dataset=rows).train()
print(json.dumps({"device": args.device.type, "steps": result.global_step,
                  "weights": next(model.parameters()).device.type,
                  "loss": result.training_loss}))
"""

FAULTS = {
    "import": ("""
        raise RuntimeError("plugin broken at import")
        """, "RuntimeError('plugin broken at import')"),
    "slow": ("""
        import time
        time.sleep(2.5)
        from hpu_plugin.hookspecs import hookimpl

        @hookimpl(tryfirst=True)
        def hpu_ddp_backend(requested):
            return None
        """, "more than HPU_PLUGIN_IMPORT_BUDGET=1"),
    "raise": ("""
        from hpu_plugin.hookspecs import hookimpl

        @hookimpl(tryfirst=True)
        def hpu_device_available():
            raise ZeroDivisionError("plugin broken in a hook")

        @hookimpl(tryfirst=True)
        def hpu_ddp_backend(requested):
            raise ZeroDivisionError("plugin broken in a hook")
        """, "ZeroDivisionError('plugin broken in a hook')"),
    "wrong-type": ("""
        from hpu_plugin.hookspecs import hookimpl

        @hookimpl(tryfirst=True)
        def hpu_device_available():
            return "no"
        """, "returned 'no' (str) from hpu_device_available"),
}


@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_faulty_plugin_is_reported_and_the_program_runs(tmp_path, kind):
    source, exception = FAULTS[kind]
    site = tmp_path / "site"
    site.mkdir()
    name = f"faulty-{kind}"
    write_plugin(site, name, source, dist=f"faulty-{kind}-dist", version="6.6.6")
    environ = clean_environ(HPU_PLUGIN_EMULATE="1", PYTHONPATH=str(site))
    if kind == "slow":
        environ["HPU_PLUGIN_IMPORT_BUDGET"] = "1"
    done = run_python(TINY_TRAINER, environ, args=(str(tmp_path / "out"),))
    assert done.returncode == 0, done.stderr[-4000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["device"] == "hpu" and outcome["weights"] == "hpu"
    assert outcome["steps"] == 2 and outcome["loss"] == outcome["loss"]  # not NaN
    reports = [line for line in done.stderr.splitlines() if f"plugin {name!r}" in line]
    assert len(reports) == 1, done.stderr[-4000:]
    assert f"faulty-{kind}-dist 6.6.6" in reports[0] and exception in reports[0]
