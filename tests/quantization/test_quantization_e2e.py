"""R9 and R10 end to end on the Gaudi emulator: unchanged user scripts in subprocesses.

Each script is what a Gaudi user would write; none imports hpu_plugin. The plugin comes
in through the ``torch.backends`` entry point, the emulator through ``HPU_PLUGIN_EMULATE``.
A tiny Llama is built from a local config and saved to a temporary directory, so nothing
is downloaded.
"""

from __future__ import annotations

import functools
import subprocess
import textwrap

import pytest
from processes import run_python, scrubbed

pytestmark = pytest.mark.e2e

TIMEOUT = 600

PRELUDE = textwrap.dedent(
    """
    import json, tempfile
    import torch
    from transformers import (
        AutoModelForCausalLM, BitsAndBytesConfig, LlamaConfig, LlamaForCausalLM,
    )

    def tiny_llama() -> str:
        path = tempfile.mkdtemp()
        torch.manual_seed(0)
        config = LlamaConfig(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, vocab_size=1000, max_position_embeddings=128,
        )
        LlamaForCausalLM(config).save_pretrained(path)
        return path

    def ops_seen(function):
        # names of every op function() calls, nested calls included, and its result
        activities = [torch.profiler.ProfilerActivity.CPU]
        with torch.profiler.profile(activities=activities) as profile:
            result = function()
        return {event.key for event in profile.key_averages()}, result

    def logits_error(model, reference, ids):
        # relative L2 error and cosine of model's logits against reference's
        with torch.no_grad():
            got = model(ids.to(model.device)).logits.float().cpu()
            want = reference(ids).logits.float()
        relative = ((got - want).norm() / want.norm()).item()
        cosine = torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0)
        return relative, cosine.item()
    """
)




@functools.cache
def emulator_started() -> None:
    """A failed start fails every test here, once, with the emulator's own message."""
    probe = run("import torch\nprint(torch.hpu.is_available())", "1")
    if probe.returncode != 0 or probe.stdout.strip().splitlines()[-1:] != ["True"]:
        pytest.fail(f"the Gaudi emulator did not start: {(probe.stderr or probe.stdout)[-2000:]}")


def run(script: str, emulate: str = "1") -> subprocess.CompletedProcess[str]:
    env = scrubbed(HPU_PLUGIN_EMULATE=emulate, TOKENIZERS_PARALLELISM="false")
    return run_python(script, env, timeout=TIMEOUT)


def run_ok(script: str, emulate: str = "1") -> dict[str, object]:
    """Run ``PRELUDE + script``; its last stdout line is a JSON report."""
    import json

    emulator_started()
    result = run(PRELUDE + textwrap.dedent(script), emulate)
    if result.returncode < 0:
        pytest.fail(
            f"the script died of signal {-result.returncode} (a crash in native code, e.g. the "
            f"emulator's fallback); its stderr ends:\n{result.stderr[-3000:]}"
        )
    assert result.returncode == 0, result.stderr[-4000:]
    report: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return report


NF4_SCRIPT = """
    path = tiny_llama()
    quantized = AutoModelForCausalLM.from_pretrained(
        path, quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4")
    )
    reference = LlamaForCausalLM.from_pretrained(path).eval()
    ids = torch.randint(0, 1000, (2, 16), generator=torch.Generator().manual_seed(1))
    ops, generated = ops_seen(
        lambda: quantized.generate(ids[:1].to("hpu"), max_new_tokens=6, do_sample=False)
    )
    import bitsandbytes as bnb
    linear4 = [m for m in quantized.modules() if isinstance(m, bnb.nn.Linear4bit)]
    relative, cosine = logits_error(quantized.eval(), reference, ids)
    # the unquantized model with each weight replaced by bitsandbytes' own CPU
    # dequantization of the packed NF4 weight that sits on the HPU
    import copy
    import bitsandbytes.functional as bnb_functional
    dequantized = LlamaForCausalLM.from_pretrained(path).eval()
    for name, module in quantized.named_modules():
        if isinstance(module, bnb.nn.Linear4bit):
            state = copy.copy(module.weight.quant_state)
            state.to("cpu")
            weight = bnb_functional.dequantize_4bit(module.weight.data.cpu(), state)
            dequantized.get_submodule(name).weight.data.copy_(weight)
    with torch.no_grad():
        cpu_logits = dequantized(ids).logits
        hpu_logits = quantized(ids.to("hpu")).logits.cpu()
    print(json.dumps({
        "model_device": str(quantized.device),
        "parameter_devices": sorted({str(p.device) for p in quantized.parameters()}),
        "linear4bit": len(linear4),
        "weight_dtype": str(linear4[0].weight.dtype),
        "quant_type": linear4[0].weight.quant_state.quant_type,
        "generated_device": str(generated.device),
        "generated_new_tokens": generated.shape[1] - 16,
        "dequantize_nf4_called": "hpu::dequantize_nf4" in ops,
        "relative": relative,
        "cosine": cosine,
        "vs_dequantized": (hpu_logits - cpu_logits).abs().max().item(),
        "scale": cpu_logits.abs().max().item(),
    }))
"""


@pytest.mark.parametrize("generation", ["1", "gaudi3"], ids=["gaudi2", "gaudi3"])
def test_nf4_model_without_device_map_lands_on_hpu0_and_generates(generation):
    report = run_ok(NF4_SCRIPT, generation)
    assert report["model_device"] == "hpu:0"
    assert report["parameter_devices"] == ["hpu:0"]
    assert report["linear4bit"] == 14  # 7 projections x 2 layers; lm_head stays unquantized
    assert report["weight_dtype"] == "torch.uint8" and report["quant_type"] == "nf4"
    assert report["generated_device"] == "hpu:0" and report["generated_new_tokens"] == 6
    # bitsandbytes took its HPU kernel, which calls the Gaudi op the emulator stands in for
    assert report["dequantize_nf4_called"] is True
    # Tolerance against the unquantized model: NF4 keeps each weight within half a level
    # gap of its block's absmax (up to ~15%, ~10% RMS on Gaussian weights); through two
    # layers the logits of this model move by ~10% RMS (measured 0.10 on the CPU). Bound:
    # relative L2 error < 0.2 and cosine similarity > 0.98.
    assert report["relative"] < 0.2, report
    assert report["cosine"] > 0.98, report
    # Against the same weights dequantized by bitsandbytes on the CPU, computed in float32
    # (the config's default compute dtype): equal up to float32 rounding.
    assert report["vs_dequantized"] <= 1e-5 * max(1.0, report["scale"]), report


QLORA_SCRIPT = """
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
    from transformers import Trainer, TrainerCallback, TrainingArguments

    path = tiny_llama()
    model = AutoModelForCausalLM.from_pretrained(
        path,
        quantization_config=BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16
        ),
    )
    model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    model = get_peft_model(model, LoraConfig(
        r=8, lora_alpha=16, lora_dropout=0.0, task_type="CAUSAL_LM",
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                        "down_proj"],
    ))
    adapters = {n for n, p in model.named_parameters() if p.requires_grad}
    frozen_before = {n: p.detach().cpu().clone() for n, p in model.named_parameters()
                     if not p.requires_grad}

    # a learnable pattern: runs of consecutive token ids
    starts = torch.randint(0, 50, (16,), generator=torch.Generator().manual_seed(0)).tolist()
    rows = [torch.arange(s, s + 32) % 50 + 10 for s in starts]
    data = [{"input_ids": r, "attention_mask": torch.ones_like(r), "labels": r.clone()}
            for r in rows]

    with_grad = []

    class Gradients(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            with_grad.append(sorted(n for n, p in model.named_parameters() if p.grad is not None))

    args = TrainingArguments(
        output_dir=tempfile.mkdtemp(), max_steps=20, per_device_train_batch_size=4,
        learning_rate=5e-3, bf16=True, logging_steps=1, report_to=[], save_strategy="no",
        disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[Gradients()])
    ops, _ = ops_seen(trainer.train)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    changed = sorted(n for n, p in model.named_parameters()
                     if not p.requires_grad and not torch.equal(p.detach().cpu(), frozen_before[n]))
    print(json.dumps({
        "args_device": str(trainer.args.device),
        "parameter_devices": sorted({p.device.type for p in model.parameters()}),
        "adapters": sorted(adapters),
        "with_grad": with_grad,
        "frozen_changed": changed,
        "losses": losses,
        "dequantize_nf4_called": "hpu::dequantize_nf4" in ops,
    }))
"""


def test_qlora_trains_only_the_adapters_of_a_4bit_model():
    report = run_ok(QLORA_SCRIPT)
    assert report["args_device"] == "hpu:0"
    assert report["parameter_devices"] == ["hpu"]
    adapters = report["adapters"]
    assert adapters and all(".lora_A." in n or ".lora_B." in n for n in adapters), adapters
    # every optimizer step: gradients on exactly the adapter weights, nothing else
    assert len(report["with_grad"]) == 20
    assert all(names == adapters for names in report["with_grad"])
    assert report["frozen_changed"] == []  # 4-bit base weights, embeddings, norms untouched
    losses = report["losses"]
    assert len(losses) == 20
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - 0.2, losses  # measured on the CPU: ~6.9 -> ~6.25
    assert report["dequantize_nf4_called"] is True


INT8_SCRIPT = """
    path = tiny_llama()
    quantized = AutoModelForCausalLM.from_pretrained(
        path, quantization_config=BitsAndBytesConfig(load_in_8bit=True)
    )
    reference = LlamaForCausalLM.from_pretrained(path).eval()
    ids = torch.randint(0, 1000, (2, 16), generator=torch.Generator().manual_seed(1))
    generated = quantized.generate(ids[:1].to("hpu"), max_new_tokens=6, do_sample=False)
    import bitsandbytes as bnb
    linear8 = [m for m in quantized.modules() if isinstance(m, bnb.nn.Linear8bitLt)]
    relative, cosine = logits_error(quantized.eval(), reference, ids)
    print(json.dumps({
        "model_device": str(quantized.device),
        "parameter_devices": sorted({str(p.device) for p in quantized.parameters()}),
        "linear8bit": len(linear8),
        "weight_dtype": str(linear8[0].weight.dtype),
        "generated_device": str(generated.device),
        "generated_new_tokens": generated.shape[1] - 16,
        "relative": relative,
        "cosine": cosine,
    }))
"""


def test_8bit_model_runs_on_gaudi2_as_bitsandbytes_documents():
    """bitsandbytes 0.50.2 lists LLM.int8 as supported on Gaudi2/3 and runs it with its
    pure-PyTorch kernels (see hpu_plugin/plugins/quantization.py), so it is placed and
    run, not refused."""
    report = run_ok(INT8_SCRIPT)
    assert report["model_device"] == "hpu:0"
    assert report["parameter_devices"] == ["hpu:0"]
    assert report["linear8bit"] == 14 and report["weight_dtype"] == "torch.int8"
    assert report["generated_device"] == "hpu:0" and report["generated_new_tokens"] == 6
    # int8 row-wise weights (error <= absmax / 254 per row) with fp16 activations:
    # measured 0.009 on the CPU; bound 0.05.
    assert report["relative"] < 0.05, report
    assert report["cosine"] > 0.998, report


def refused(settings: dict[str, object], emulate: str) -> dict[str, object]:
    """Load with ``BitsAndBytesConfig(**settings)``; report the ValueError, if any."""
    script = """
        path = tiny_llama()
        try:
            AutoModelForCausalLM.from_pretrained(
                path, quantization_config=BitsAndBytesConfig(**SETTINGS)
            )
        except ValueError as error:
            print(json.dumps({"refused": str(error), "type": type(error).__name__}))
        else:
            print(json.dumps({"refused": None}))
    """
    return run_ok(script.replace("SETTINGS", repr(settings)), emulate)


@pytest.mark.parametrize("bits", [4, 8])
def test_first_generation_gaudi_is_refused_before_loading(bits):
    report = refused({f"load_in_{bits}bit": True}, emulate="gaudi")
    message = report["refused"]
    assert message is not None, "first-generation Gaudi loaded a bitsandbytes model"
    assert report["type"] == "GaudiConfigError"  # a Refusal, a ValueError
    assert f"load_in_{bits}bit=True" in message and "first-generation Gaudi" in message


def test_fp4_is_refused_before_loading_with_the_fix():
    report = refused({"load_in_4bit": True, "bnb_4bit_quant_type": "fp4"}, emulate="1")
    message = report["refused"]
    assert message is not None, "fp4 loaded on Gaudi, which bitsandbytes cannot dequantize"
    assert "bnb_4bit_quant_type='fp4'" in message and "bnb_4bit_quant_type='nf4'" in message
