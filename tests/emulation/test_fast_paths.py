"""Gaudi's fast paths give the ordinary path's results: unchanged Trainer and generate() code
on the emulated Gaudi, every fast path off against all on, for Llama, Qwen2, GPT-2 and BERT."""

from __future__ import annotations

import json
import sys

import pytest
from processes import TRAINING_ROWS, result_of

SCRIPT = TRAINING_ROWS + r"""
import json, os
from transformers import (BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                          LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Trainer,
                          TrainingArguments)
from hpu_emulator import counters

SIZES = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
             num_attention_heads=4, max_position_embeddings=64, pad_token_id=0)
MODELS = {
    "llama": lambda: LlamaForCausalLM(LlamaConfig(num_key_value_heads=2, **SIZES)),
    "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(num_key_value_heads=2, **SIZES)),
    "gpt2": lambda: GPT2LMHeadModel(GPT2Config(vocab_size=96, n_embd=32, n_layer=2, n_head=4,
                                               n_positions=64, pad_token_id=0)),
    "bert": lambda: BertForMaskedLM(BertConfig(**SIZES)),
}

def train(name):
    torch.manual_seed(0)
    seen = Losses()
    args = TrainingArguments(output_dir="/tmp/hpu-plugin-test-fast", max_steps=20,
                             per_device_train_batch_size=2, learning_rate=1e-3, report_to=[],
                             save_strategy="no", logging_steps=1, seed=0, disable_tqdm=True)
    trainer = Trainer(model=MODELS[name]().to("hpu"), args=args, train_dataset=Rows(),
                      data_collator=collate, callbacks=[seen])
    counters.reset()
    trainer.train()
    return seen.losses, counters.snapshot()

def infer(name):
    torch.manual_seed(0)
    model = MODELS[name]().to("hpu").eval()
    ids = torch.tensor([[0, 0, 0, 5, 9, 14, 27], [4, 8, 15, 16, 23, 42, 7]]).to("hpu")
    mask = (ids != 0).long() if name != "bert" else torch.ones_like(ids)
    counters.reset()
    with torch.no_grad():
        if name == "bert":
            tokens = model(input_ids=ids, attention_mask=mask).logits.argmax(-1)
        else:
            tokens = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=10,
                                    do_sample=False)
        counts = counters.snapshot()
        # a forward of the model called directly (generate() runs graphs with the fast
        # paths on; a direct call runs op by op, with the kernels generate() gave it)
        counters.reset()
        model(input_ids=ids, attention_mask=mask)
    return tokens.cpu().tolist(), {**counts, "forward": counters.snapshot()}

result = {}
for name in MODELS:
    arms = {}
    for arm, switch in (("off", "0"), ("on", "1")):
        os.environ["HPU_PLUGIN_FAST"] = switch
        losses, train_counts = train(name)
        tokens, infer_counts = infer(name)
        arms[arm] = {"losses": losses, "train": train_counts, "tokens": tokens,
                     "infer": infer_counts}
    result[name] = arms
print("RESULT" + json.dumps(result))
"""


@pytest.mark.e2e
def test_fast_paths_keep_losses_and_tokens_and_cut_launches(run):
    out = run(SCRIPT, {"TRANSFORMERS_VERBOSITY": "error"}, timeout=600).stdout
    result = result_of(out)
    for name, arms in result.items():
        off, on = arms["off"], arms["on"]
        assert len(off["losses"]) == len(on["losses"]) == 20, name
        for a, b in zip(on["losses"], off["losses"], strict=True):
            assert abs(a - b) <= 1e-3 * abs(b), (name, on["losses"], off["losses"])
        assert on["tokens"] == off["tokens"], name
        # the fused optimizer and clip-norm serve every model; the unfused arm has none
        assert off["train"]["fused_kernels"] == 0 and on["train"]["fused_kernels"] >= 40, name
        assert on["train"]["launches"] < off["train"]["launches"], name
    # models with RMSNorm and sdpa attention take the fused kernels in inference too
    for name in ("llama", "qwen2"):
        assert result[name]["on"]["infer"]["forward"]["fused_kernels"] > 0, name
        assert result[name]["on"]["infer"]["launches"] < result[name]["off"]["infer"]["launches"]
        assert (result[name]["on"]["infer"]["forward"]["launches"]
                < result[name]["off"]["infer"]["forward"]["launches"]), name


OPTIMIZERS = r"""
import json, os
import torch
from accelerate import Accelerator
from hpu_emulator import counters

def run(make, fast, clip):
    os.environ["HPU_PLUGIN_FAST"] = fast
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    model.to("hpu")
    optimizer = make(model.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    accelerator = Accelerator()
    model, optimizer = accelerator.prepare(model, optimizer)
    norms = []
    for step in range(6):
        x = torch.randn(5, 8).to("hpu")
        loss = model(x).pow(2).mean() * 10
        accelerator.backward(loss)
        norms.append(float(accelerator.clip_grad_norm_(model.parameters(), clip)))
        counters.reset()
        optimizer.step()
        launches = counters.snapshot()["launches"]
        scheduler.step()
        optimizer.zero_grad()
    state = optimizer.state_dict()["state"].get(0, {})
    return ([p.detach().cpu().flatten().tolist() for p in model.parameters()], norms,
            sorted(state), launches)

MAKERS = {
    "adamw": lambda p: torch.optim.AdamW(p, lr=0.05, weight_decay=0.1),
    "adamw_fused": lambda p: torch.optim.AdamW(p, lr=0.05, fused=True),
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01,
                                              nesterov=True),
    # the user chose torch's own loop: kept
    "adamw_not_fused": lambda p: torch.optim.AdamW(p, lr=0.05, fused=False),
    "sgd_not_foreach": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=False),
    "adamw_foreach": lambda p: torch.optim.AdamW(p, lr=0.05, foreach=True),
}
out = {}
for name, make in MAKERS.items():
    off, on = run(make, "0", 0.5), run(make, "1", 0.5)
    diff = max(abs(a - b) for x, y in zip(off[0], on[0]) for a, b in zip(x, y))
    out[name] = {"diff": diff, "norms": [off[1], on[1]], "state": [off[2], on[2]],
                 "launches": [off[3], on[3]]}
print("RESULT" + json.dumps(out))
"""


@pytest.mark.e2e
def test_fused_optimizers_and_clip_norm_match_torch_and_keep_its_state(run):
    out = run(OPTIMIZERS).stdout
    result = result_of(out)
    for name, r in result.items():
        assert r["diff"] < 1e-5, (name, r)  # six steps, a scheduler halving lr, clipping
        off, on = r["norms"]
        assert all(abs(a - b) <= 1e-5 * max(1.0, b) for a, b in zip(on, off, strict=True))
        assert r["state"][0] == r["state"][1], (name, r["state"])  # torch's state layout
        if name.endswith(("_not_fused", "_not_foreach", "_foreach")):  # the user's choice
            assert r["launches"][1] == r["launches"][0], (name, r)
        else:
            assert r["launches"][1] < r["launches"][0], (name, r["launches"])


FP16 = r"""
import json, os
import torch
from accelerate import Accelerator
from hpu_emulator import counters

def run(fused, fast):
    os.environ["HPU_PLUGIN_FAST"] = fast
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    model.to("hpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1, fused=fused)
    accelerator = Accelerator(mixed_precision="fp16")
    model, optimizer = accelerator.prepare(model, optimizer)
    kernels, skipped = [], []
    for step in range(6):
        x = torch.randn(5, 8).to("hpu")
        if step == 3:
            x[0, 0] = float("inf")  # a non-finite gradient: the scaler skips this step
        with accelerator.autocast():
            out = model(x)
        # the loss in float32: Gaudi's autocast lists run mean and mul in the low precision,
        # and an fp16 loss times the scaler's first scales overflows in more steps than one
        loss = out.float().pow(2).mean() * 10
        accelerator.backward(loss)
        if step % 2:
            accelerator.clip_grad_norm_(model.parameters(), 0.5)  # unscales first
        counters.reset()
        optimizer.step()
        kernels.append(counters.snapshot()["fused_kernels"])
        skipped.append(optimizer.step_was_skipped)
        optimizer.zero_grad()
    return [p.detach().cpu().flatten().tolist() for p in model.parameters()], kernels, skipped

out = {}
for fused in (None, True):
    off, on = run(fused, "0"), run(fused, "1")
    diff = max(abs(a - b) for x, y in zip(off[0], on[0]) for a, b in zip(x, y))
    out[str(fused)] = {"diff": diff, "kernels": [off[1], on[1]], "skipped": [off[2], on[2]]}
print("RESULT" + json.dumps(out))
"""


@pytest.mark.e2e
def test_fused_optimizer_under_fp16_with_a_gradient_scaler(run):
    out = run(FP16).stdout
    result = result_of(out)
    for fused, r in result.items():  # torch's fused=True scales itself; the default does not
        assert r["diff"] < 1e-5, (fused, r)
        off, on = r["kernels"]
        assert not any(off), (fused, off)
        # one kernel per step the scaler lets through (the first scale overflows, and the
        # step with an infinite input is skipped), also after the first scaled step
        assert on == [0, 1, 1, 0, 1, 1], (fused, on)
        assert r["skipped"][0] == r["skipped"][1], (fused, r["skipped"])


USER_BINDINGS = r"""
import copy, json, pickle, sys
import torch
import transformers.models.llama.modeling_llama as modeling
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                     num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, max_position_embeddings=64,
                                     pad_token_id=0)).to("hpu").eval()
ids = torch.tensor([[5, 9, 14, 27, 3, 8]])

def tokens(m):
    return m.generate(ids.to("hpu"), max_new_tokens=4, do_sample=False).cpu().tolist()

first = tokens(model)  # the fast paths take the model here
calls = {"norm": 0, "rope": 0}
norm = model.model.norm
class_forward = type(norm).forward

def my_norm(hidden_states):
    calls["norm"] += 1
    return class_forward(norm, hidden_states)

def my_rope(q, k, cos, sin, *args, **kwargs):
    calls["rope"] += 1
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return (q * cos + modeling.rotate_half(q) * sin, k * cos + modeling.rotate_half(k) * sin)

plugin_rope = modeling.apply_rotary_pos_emb
norm.forward, modeling.apply_rotary_pos_emb = my_norm, my_rope
second = tokens(model)
kept = norm.forward is my_norm and modeling.apply_rotary_pos_emb is my_rope
del norm.forward
modeling.apply_rotary_pos_emb = plugin_rope
twin = copy.deepcopy(model)
pickle.loads(pickle.dumps(model))
model.cpu()
with torch.no_grad():
    logits = model(ids).logits
torch.save(model, sys.argv[1])
torch.save(logits, sys.argv[1] + ".logits")
print("RESULT" + json.dumps({"same": [first == second, first == tokens(twin)], "calls": calls,
                             "kept": kept}))
"""

LOAD = r"""
import json, sys
import torch
model = torch.load(sys.argv[1], weights_only=False)
with torch.no_grad():
    same = torch.equal(model(torch.tensor([[5, 9, 14, 27, 3, 8]])).logits,
                       torch.load(sys.argv[1] + ".logits"))
print("RESULT" + json.dumps({"same": same, "plugin": "hpu_plugin.activation" in sys.modules}))
"""


@pytest.mark.e2e
def test_what_the_user_bound_stays_and_a_fused_model_copies_and_saves_as_before(run, tmp_path):
    """After a first ``generate()`` gave the model the fused kernels: a ``forward`` the user
    sets on a norm layer and an ``apply_rotary_pos_emb`` they bind stay theirs; the model
    deep-copies and pickles, and ``torch.save(model)`` loads where no Gaudi (and so no
    plugin) is in play, running as Transformers wrote it."""
    import sys

    saved = str(tmp_path / "model.pt")
    out = run("", {"TRANSFORMERS_VERBOSITY": "error"},
              args=[sys.executable, "-c", USER_BINDINGS, saved]).stdout
    result = result_of(out)
    assert result["kept"] is True
    assert result["calls"]["norm"] > 0 and result["calls"]["rope"] > 0, result
    assert result["same"] == [True, True], result
    loaded = result_of(run("", emulate=None, args=[sys.executable, "-c", LOAD, saved]).stdout)
    assert loaded == {"same": True, "plugin": False}


CPU_FIRST = r"""
import json
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from hpu_plugin.fast_paths.fused_modeling import _fused

torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                     num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, pad_token_id=0)).eval()
ids = torch.tensor([[5, 9, 14, 27, 3, 8]])
cpu = model.generate(ids, max_new_tokens=4, do_sample=False).tolist()
model.to("hpu")
hpu = model.generate(ids.to("hpu"), max_new_tokens=4, do_sample=False).cpu().tolist()
fused = sum(_fused(m) for m in model.modules() if type(m).__name__ == "LlamaRMSNorm")
print("RESULT" + json.dumps({"same": cpu == hpu, "fused": fused}))
"""


@pytest.mark.e2e
def test_a_model_that_ran_on_the_cpu_first_gets_the_fused_norms_on_hpu(run):
    """A model tried on the CPU, then moved to the Gaudi: its RMSNorm layers take the
    kernel there (2 layers: 5 norms), with the CPU's greedy tokens."""
    result = result_of(run(CPU_FIRST, {"TRANSFORMERS_VERBOSITY": "error"}).stdout)
    assert result == {"same": True, "fused": 5}, result


#: SGD with momentum and AdamW stepped through Accelerate's FSDP 2 on two cards, with the
#: fused optimizer off ("0") and on ("1"), the model left on the CPU for FSDP to place (as a
#: ``Trainer`` leaves it) or moved to the card first: the whole parameters after three
#: steps, and the Gaudi kernels each step ran. Each rank writes its own file.
SHARDS = r"""
import json, os, sys
import torch
import torch.distributed as dist
from accelerate import Accelerator
from accelerate.utils import FullyShardedDataParallelPlugin
from hpu_emulator import counters

accelerator = Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2))

def train(kind, fast, on_card):
    os.environ["HPU_PLUGIN_FAST_OPTIMIZER"] = fast
    torch.manual_seed(0)
    # the last layer has one output: its weight and bias rows are all on the first card
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    if on_card:
        model.to(accelerator.device)
    optimizer = (torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
                 if kind == "sgd" else
                 torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1))
    model, optimizer = accelerator.prepare(model, optimizer)
    torch.manual_seed(1 + accelerator.process_index)  # different data on each card
    kernels = []
    for _ in range(3):
        x = torch.randn(4, 8).to(accelerator.device)
        accelerator.backward(model(x).pow(2).mean())
        before = counters.snapshot()["fused_kernels"]
        optimizer.step()
        kernels.append(counters.snapshot()["fused_kernels"] - before)
        optimizer.zero_grad()
    whole = [p.full_tensor().detach().cpu().flatten().tolist() for p in model.parameters()]
    return {"parameters": whole, "kernels": kernels,
            "sharded": all(type(p).__name__ == "DTensor" for p in model.parameters()),
            "empty": [p.to_local().numel() == 0 for p in model.parameters()]}

result = {f"{kind} {where}": {fast: train(kind, fast, where == "card") for fast in ("0", "1")}
          for kind in ("sgd", "adamw") for where in ("cpu", "card")}
with open(f"{sys.argv[1]}/rank{dist.get_rank()}.json", "w") as out:
    json.dump(result, out)
"""


@pytest.mark.e2e
def test_fused_optimizers_step_each_cards_shards_under_fsdp2(run, tmp_path):
    script = tmp_path / "shards.py"
    script.write_text(SHARDS)
    run("", {"HPU_PLUGIN_EMULATE_DEVICES": "2", "OMP_NUM_THREADS": "1"}, args=[
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
        "2", str(script), str(tmp_path)])
    for rank in (0, 1):
        result = json.loads((tmp_path / f"rank{rank}.json").read_text())
        for case, arms in result.items():
            off, on = arms["0"], arms["1"]
            assert off["sharded"] and on["sharded"], (rank, case)
            # the second card holds nothing of the last layer's weight and bias
            assert on["empty"] == [False, False, rank == 1, rank == 1], (rank, case, on)
            # one kernel a step for the one group, on each card (the second card's shard of
            # the last layer is empty); torch's step without the fast path
            assert (off["kernels"], on["kernels"]) == ([0] * 3, [1] * 3), (rank, case, arms)
            diff = max(abs(a - b) for x, y in zip(off["parameters"], on["parameters"],
                                                  strict=True) for a, b in zip(x, y, strict=True))
            assert diff < 1e-6, (rank, case, diff)
