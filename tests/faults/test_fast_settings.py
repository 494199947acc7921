"""The fast paths' and shape buckets' settings are refused once, at activation.

``HPU_PLUGIN_FAST*``, ``HPU_PLUGIN_GRAPHS_MAX``, ``HPU_PLUGIN_TRAIN_GRAPHS_REGION``,
``HPU_PLUGIN_BUCKETS*`` and ``HPU_PLUGIN_FP8*``
are read deep inside ``train()``, ``generate()`` and ``from_pretrained``; a value no parser
accepts must not wait until then (a warning per object that asks, then a raise mid-training),
and a misspelt name must not be ignored.
Inside ``import torch`` the plugin is off with one message naming the variable, its value and
the fix; ``doctor`` lists it as an error with that fix; good values activate as before.
"""

from __future__ import annotations

import json

import pytest
from processes import TRAINING_ROWS, emulated, result_of, run_python

from hpu_plugin.fast_paths.decisions import FAST_PATHS
from hpu_plugin.gaudi import tuning

from .conftest import activate_each, environ, report, run

#: A bad value, and the fix its message must carry.
BAD = {
    "HPU_PLUGIN_FAST": ("maybe", "HPU_PLUGIN_FAST=0 turns it off"),
    "HPU_PLUGIN_FAST_GRAPHS": ("2", "HPU_PLUGIN_FAST_GRAPHS=0 turns it off"),
    "HPU_PLUGIN_FAST_SDPA": ("\u0661", "HPU_PLUGIN_FAST_SDPA=0 turns it off"),
    "HPU_PLUGIN_GRAPHS_MAX": ("0", "HPU_PLUGIN_FAST_GRAPHS=0 turns graphs off"),
    "HPU_PLUGIN_TRAIN_GRAPHS_REGION": ("layers", "HPU_PLUGIN_TRAIN_GRAPHS_REGION=blocks compiles"),
    "HPU_PLUGIN_BUCKETS": ("maybe", "HPU_PLUGIN_BUCKETS=0 to turn shape buckets off"),
    "HPU_PLUGIN_BUCKETS_GROUP": ("maybe", "HPU_PLUGIN_BUCKETS_GROUP=0 keeps"),
    "HPU_PLUGIN_BUCKETS_LENGTH": ("512,64", "HPU_PLUGIN_BUCKETS_LENGTH=128,256,512"),
    "HPU_PLUGIN_FP8": ("fast", "HPU_PLUGIN_FP8=measure and HPU_PLUGIN_FP8_STATS="),
    # misspelt: the fast path it was meant to turn off would run
    "HPU_PLUGIN_FAST_FUSED_OPTIMIZER": ("0", "did you mean HPU_PLUGIN_FAST_OPTIMIZER? unset "
                                        "HPU_PLUGIN_FAST_FUSED_OPTIMIZER"),
    "HPU_PLUGIN_BUCKETS_SEQ": ("128", "unset HPU_PLUGIN_BUCKETS_SEQ"),
    "HPU_PLUGIN_FP8_STAT": ("./fp8", "did you mean HPU_PLUGIN_FP8_STATS?"),
}

#: Values that each parser accepts: activation goes on as without them.
GOOD = {
    "HPU_PLUGIN_FAST": "0", "HPU_PLUGIN_FAST_GRAPHS": "1", "HPU_PLUGIN_GRAPHS_MAX": "4",
    "HPU_PLUGIN_TRAIN_GRAPHS_REGION": "Model",
    "HPU_PLUGIN_BUCKETS": "on", "HPU_PLUGIN_BUCKETS_GROUP": "0",
    "HPU_PLUGIN_BUCKETS_LENGTH": "128,256", "HPU_PLUGIN_BUCKETS_BATCH": "off",
    "HPU_PLUGIN_BUCKETS_CACHE": " ", "HPU_PLUGIN_FP8": "0",
}

def test_every_fast_path_switch_is_checked_up_front():
    assert {path.setting for path in FAST_PATHS} == {
        f"{tuning.FAST}_{name}" for name in tuning.FAST_NAMES}
    assert tuning.faults({}) == []
    assert tuning.faults(GOOD) == []
    found = [fault.variable for fault in tuning.faults({n: v for n, (v, _) in BAD.items()})]
    assert sorted(found) == sorted(BAD)


@pytest.fixture(scope="module")
def batch() -> dict[str, dict[str, object]]:
    cases = {name: {"HPU_PLUGIN_EMULATE": "1", name: value} for name, (value, _) in BAD.items()}
    cases["good"] = {"HPU_PLUGIN_EMULATE": "1", **GOOD}
    cases["unset"] = {"HPU_PLUGIN_EMULATE": "1"}
    return activate_each(cases)


@pytest.mark.parametrize("name", list(BAD))
def test_a_bad_value_is_refused_once_at_activation(batch, name):
    value, fix = BAD[name]
    result = batch[name]
    assert result["status"] == "failed" and result["tensor"] == [1.0, 1.0]
    assert f"{name}={value!r}" in str(result["reason"]) and fix in str(result["reason"])
    assert result["messages"] == [f"hpu_plugin: {result['reason']}"]


@pytest.mark.parametrize("case", ["good", "unset"])
def test_good_values_activate_as_before(batch, case):
    result = batch[case]
    assert result["status"] == "active", result
    assert [line for line in result["messages"] if "HPU_PLUGIN_" in line] == []


DOCTOR = """
import json, sys
from hpu_plugin.cli import main
code = main(["doctor", "--json"])
print("REPORT " + json.dumps({"code": code}))
"""


@pytest.mark.parametrize("name", ["HPU_PLUGIN_FAST", "HPU_PLUGIN_GRAPHS_MAX",
                                  "HPU_PLUGIN_FAST_GRAPHS", "HPU_PLUGIN_BUCKETS_GROUP",
                                  "HPU_PLUGIN_FP8", "HPU_PLUGIN_FAST_FUSED_OPTIMIZER"])
def test_doctor_lists_a_bad_value_as_an_error_with_its_fix(name):
    value, fix = BAD[name]
    done = run(DOCTOR, environ(HPU_PLUGIN_EMULATE="1", **{name: value}), timeout=240)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    # doctor's own import torch refuses it once (doctor keeps activation's log to itself)
    assert len([line for line in done.stderr.splitlines() if name in line]) <= 1, done.stderr
    findings = json.loads(done.stdout[:done.stdout.rindex("REPORT ")])
    mine = [f for f in findings["findings"] if f["check"] == name]
    assert len(mine) == 1 and mine[0]["severity"] == "error", findings
    assert fix in mine[0]["fix"] and mine[0]["value"] == value
    if name.endswith("_FUSED_OPTIMIZER"):  # a misspelt name: the fix lists the real ones
        assert "Supported: HPU_PLUGIN_FAST_OPTIMIZER, " in mine[0]["message"], mine
    assert report(done)["code"] != 0


USER_PROGRAM = TRAINING_ROWS + r"""
import json
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments
torch.manual_seed(0)
config = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
model = LlamaForCausalLM(config)
args = TrainingArguments(output_dir="out", max_steps=2, per_device_train_batch_size=2,
                         report_to=[], logging_steps=1, save_strategy="no")
losses = Losses()
Trainer(model=model, args=args, train_dataset=Rows(), data_collator=collate,
        callbacks=[losses]).train()
model.eval()
out = model.generate(torch.tensor([[3, 4, 5]]), max_new_tokens=3, min_new_tokens=3,
                     do_sample=False)
print("RESULT " + json.dumps({"device": str(args.device), "losses": len(losses.losses),
                              "tokens": out.shape[-1]}))
"""


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["HPU_PLUGIN_FAST", "HPU_PLUGIN_GRAPHS_MAX"])
def test_a_user_program_goes_on_with_one_message_not_a_raise_mid_training(name, tmp_path):
    """The program a new user runs: a bad value is said once, at ``import torch``; training
    and ``generate()`` then run without the plugin instead of raising half way."""
    value, fix = BAD[name]
    done = run_python(USER_PROGRAM, emulated(**{name: value}), timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    ours = [line for line in done.stderr.splitlines() if "hpu_plugin" in line]
    assert len(ours) == 1 and name in ours[0] and fix in ours[0], done.stderr[-4000:]
    assert result_of(done.stdout) == {"device": "cpu", "losses": 2, "tokens": 6}
