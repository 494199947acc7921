"""``fused_rope``: Llama's ``apply_rotary_pos_emb``, rebound in a model's own modeling module
when the model trains or generates on ``hpu``, gives Transformers' results (20 Trainer steps,
greedy tokens: Llama and Qwen2 on the emulated Gaudi), leaves CPU calls to the original,
leaves modules whose rotary code differs (Phi-3) and the switch turned off alone, and is
undone with the plugin."""

from __future__ import annotations

import importlib

import pytest
from processes import TRAINING_ROWS, emulated, result_of, run_python

from hpu_plugin.fast_paths import fused_rope

SCRIPT = TRAINING_ROWS + r"""
import json, os
from transformers import (LlamaConfig, LlamaForCausalLM, Phi3Config, Phi3ForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM, Trainer, TrainingArguments)
import transformers.models.llama.modeling_llama as llama
import transformers.models.phi3.modeling_phi3 as phi3
import transformers.models.qwen2.modeling_qwen2 as qwen2
from hpu_plugin import hosts
from hpu_emulator import counters

OWN = {m: m.apply_rotary_pos_emb for m in (llama, qwen2, phi3)}
SIZES = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
             pad_token_id=0)
MODELS = {"llama": (lambda: LlamaForCausalLM(LlamaConfig(**SIZES)), llama),
          "qwen2": (lambda: Qwen2ForCausalLM(Qwen2Config(**SIZES)), qwen2)}

def rebound():
    return {m.__name__.rsplit(".", 1)[1]: m.apply_rotary_pos_emb is not own
            for m, own in OWN.items()}

def train(make):
    torch.manual_seed(0)
    seen = Losses()
    args = TrainingArguments(output_dir="/tmp/hpu-plugin-test-rope", max_steps=20,
                             per_device_train_batch_size=2, learning_rate=1e-3, report_to=[],
                             save_strategy="no", logging_steps=1, seed=0, disable_tqdm=True)
    counters.reset()
    Trainer(model=make().to("hpu"), args=args, train_dataset=Rows(), data_collator=collate,
            callbacks=[seen]).train()
    return seen.losses, counters.snapshot()["fused_kernels"]

def generate(make, device="hpu"):
    torch.manual_seed(0)
    model = make().to(device).eval()
    ids = torch.tensor([[0, 0, 0, 5, 9, 14, 27], [4, 8, 15, 16, 23, 42, 7]]).to(device)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=(ids != 0).long(),
                             max_new_tokens=8, do_sample=False)
    return out.cpu().tolist()

def cpu_logits():
    torch.manual_seed(0)
    model = MODELS["llama"][0]()
    ids = torch.tensor([[5, 9, 14, 27, 3, 8], [4, 8, 15, 16, 23, 42]])
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    grad = model.model.layers[0].self_attn.q_proj.weight.grad
    return torch.cat([out.logits.flatten(), grad.flatten()])

# The Trainer's blocks train eagerly here: inside a training graph (the default) the kernel
# runs as part of the graph's one launch, so only eager steps show it in the counters
# (tests/emulation/test_training_graphs.py trains a Llama through graphs, with eager losses).
os.environ["HPU_PLUGIN_FAST_TRAIN_GRAPHS"] = "0"
result = {"cpu_before": cpu_logits(), "rebound": {},
          "cpu_tokens": [generate(MODELS["llama"][0], "cpu")]}
for arm in ("0", "1"):
    os.environ["HPU_PLUGIN_FAST_ROPE"] = arm
    for name, (make, module) in MODELS.items():
        result.setdefault(name, {})[arm] = {"train": train(make), "tokens": generate(make)}
    result["rebound"][arm] = rebound()
def bit_for_bit(cos_batch):
    # the rebound function against Llama's own, forward and backward, float32 on hpu
    torch.manual_seed(1)
    q = torch.randn(2, 4, 7, 8, device="hpu", requires_grad=True)
    k = torch.randn(2, 2, 7, 8, device="hpu", requires_grad=True)
    cos, sin = torch.randn(2, cos_batch, 7, 8, device="hpu").unbind(0)
    counters.reset()
    fused = llama.apply_rotary_pos_emb(q, k, cos, sin)
    ran = counters.snapshot()["fused_kernels"]
    plain = OWN[llama](q, k, cos, sin)
    grads = [torch.autograd.grad((a * 1.5).sum() + (b * b).sum(), (q, k))
             for a, b in (fused, plain)]
    return (ran, all(torch.equal(a, b) for a, b in zip(fused, plain))
            and all(torch.equal(a, b) for a, b in zip(*grads)))

result["bit_for_bit"] = [bit_for_bit(2), bit_for_bit(1)]
result["cpu_same"] = bool(torch.equal(result.pop("cpu_before"), cpu_logits()))
result["cpu_tokens"].append(generate(MODELS["llama"][0], "cpu"))
phi = lambda: Phi3ForCausalLM(Phi3Config(**{**SIZES, "partial_rotary_factor": 0.5}))
result["phi3_tokens"] = generate(phi)
result["rebound"]["phi3"] = rebound()
from hpu_plugin.patching import this_process
result["patched"] = [p for p in this_process.hosts.made if "apply_rotary_pos_emb" in p]
hosts.uninstall()
result["rebound"]["undone"] = rebound()
print("RESULT" + json.dumps(result))
"""


@pytest.fixture(scope="module")
def result() -> dict:
    done = run_python(SCRIPT, emulated(TRANSFORMERS_VERBOSITY="error"), timeout=600, check=True)
    return result_of(done.stdout)


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_losses_and_tokens_are_transformers_and_the_kernel_ran(result: dict, name: str) -> None:
    off, on = result[name]["0"], result[name]["1"]
    (losses_off, kernels_off), (losses_on, kernels_on) = off["train"], on["train"]
    assert len(losses_off) == len(losses_on) == 20
    for a, b in zip(losses_on, losses_off, strict=True):
        assert abs(a - b) <= 1e-3 * abs(b), (losses_on, losses_off)
    # q and k of 2 layers, forward and backward, at each of the 20 steps
    assert kernels_on - kernels_off == 20 * 2 * 2 * 2, (kernels_on, kernels_off)
    assert on["tokens"] == off["tokens"]


def test_float32_forward_and_backward_are_llamas_bit_for_bit(result: dict) -> None:
    # cos/sin of the query's batch (generate) and of batch 1 (the Trainer: no position ids)
    assert result["bit_for_bit"] == [[2, True], [2, True]]


def test_rebound_only_after_an_hpu_model_with_the_switch_on_and_undone(result: dict) -> None:
    rebound = result["rebound"]
    assert rebound["0"] == {"modeling_llama": False, "modeling_qwen2": False,
                            "modeling_phi3": False}
    assert rebound["1"] == {"modeling_llama": True, "modeling_qwen2": True,
                            "modeling_phi3": False}
    assert rebound["phi3"]["modeling_phi3"] is False  # its partial rotary code differs
    assert sorted(result["patched"]) == [
        "transformers.models.llama.modeling_llama.apply_rotary_pos_emb",
        "transformers.models.qwen2.modeling_qwen2.apply_rotary_pos_emb"]
    assert not any(rebound["undone"].values())


def test_a_cpu_model_of_the_same_class_gets_the_unfused_result(result: dict) -> None:
    assert result["cpu_same"]  # logits and a gradient, bit for bit, with the name rebound
    before, after = result["cpu_tokens"]
    assert before == after
    assert len(result["phi3_tokens"][0]) == 7 + 8  # Phi-3 generated, with its own function


def test_which_modules_have_llamas_rotary_code() -> None:
    def module(name: str) -> object:
        return importlib.import_module(f"transformers.models.{name}.modeling_{name}")

    taken = {name: fused_rope.is_llamas(module(name)) for name in
             ("llama", "mistral", "qwen2", "qwen3", "mixtral", "phi3", "gpt_neox", "cohere")}
    assert taken == {"llama": True, "mistral": True, "qwen2": True, "qwen3": True,
                     "mixtral": True, "phi3": False, "gpt_neox": False, "cohere": False}


def test_a_replacement_bound_in_modeling_llama_is_not_taken_as_the_reference(
        monkeypatch: pytest.MonkeyPatch) -> None:
    llama = importlib.import_module("transformers.models.llama.modeling_llama")
    shipped = llama.apply_rotary_pos_emb

    def apply_rotary_pos_emb(q: object, k: object, cos: object, sin: object,
                             unsqueeze_dim: int = 1) -> object:
        return shipped(q, k, cos, sin, unsqueeze_dim)  # the user's own, e.g. with logging

    monkeypatch.setattr(llama, "apply_rotary_pos_emb", apply_rotary_pos_emb)
    fused_rope.llama_code.cache_clear()
    try:
        # the user's function would match itself; Transformers' copies no longer match it
        assert fused_rope.llama_code() is None
        assert not fused_rope.is_llamas(llama)
        assert not fused_rope.is_llamas(
            importlib.import_module("transformers.models.qwen2.modeling_qwen2"))
    finally:
        fused_rope.llama_code.cache_clear()
    monkeypatch.undo()
    assert fused_rope.is_llamas(llama)
