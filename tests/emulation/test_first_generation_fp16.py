"""fp16 on a first-generation Gaudi, which cannot compute in it: refused as Accelerate sets up
(the ``Trainer``'s ``fp16=True``, ``Accelerator(mixed_precision="fp16")``), naming the setting
and bf16 as the fix, before any forward pass; bf16 and the CPU are untouched."""

from __future__ import annotations

import json

SCRIPT = """
import json, torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

def attempt(make):
    AcceleratorState._reset_state(True)
    try:
        make()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok"

model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                     num_hidden_layers=1, num_attention_heads=2))
def bf16_after_fp16_launch():
    # an fp16 launch configuration, a script that asks for bf16: Accelerate's own later
    # AcceleratorState() calls (prepare(optimizer)) keep the bf16 it was set up with
    import os
    os.environ["ACCELERATE_MIXED_PRECISION"] = "fp16"
    accelerator = Accelerator(mixed_precision="bf16")
    accelerator.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
    del os.environ["ACCELERATE_MIXED_PRECISION"]

def cpu_by_environment(value):
    # Accelerate reads ACCELERATE_USE_CPU with its str_to_bool: y, yes, t, true, on, 1
    import os
    os.environ["ACCELERATE_USE_CPU"] = value
    try:
        Accelerator(mixed_precision="fp16")
    finally:
        del os.environ["ACCELERATE_USE_CPU"]

args = lambda **kw: TrainingArguments(output_dir="/tmp/hpu-plugin-test-fp16", report_to=[], **kw)
print("RESULT" + json.dumps({
    "trainer_fp16": attempt(lambda: Trainer(model=model, args=args(fp16=True))),
    "accelerator_fp16": attempt(lambda: Accelerator(mixed_precision="fp16")),
    "trainer_bf16": attempt(lambda: Trainer(model=model, args=args(bf16=True))),
    "cpu_fp16": attempt(lambda: Accelerator(mixed_precision="fp16", cpu=True)),
    "launcher_fp16_script_bf16": attempt(bf16_after_fp16_launch),
    **{f"cpu_env_{v}": attempt(lambda: cpu_by_environment(v)) for v in ("true", "t", "Y")},
}))
"""


def test_fp16_is_refused_on_the_first_generation_before_work(run):
    out = run(SCRIPT, {"HPU_PLUGIN_EMULATE": "gaudi"}).stdout
    result = json.loads(out.split("RESULT", 1)[1].strip().splitlines()[0])
    for case in ("trainer_fp16", "accelerator_fp16"):
        assert "mixed_precision='fp16'" in result[case], result
        assert "first-generation Gaudi" in result[case] and "bf16=True" in result[case], result
    assert result["trainer_bf16"] == "ok" and result["cpu_fp16"] == "ok", result
    assert result["launcher_fp16_script_bf16"] == "ok", result
    assert [result[f"cpu_env_{v}"] for v in ("true", "t", "Y")] == ["ok"] * 3, result
