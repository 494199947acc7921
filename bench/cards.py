"""A ``Trainer`` across two emulated Gaudi cards: launches a step and gradient memory.

The same unchanged bf16 ``Trainer`` script (a tiny Llama: 2 layers, hidden 64; batch 4 of
64 tokens a card, AdamW, ``max_grad_norm=1.0``) runs under ``torchrun`` on two emulated
cards, one process each, with DDP (the default) and with FSDP 2 (``fsdp="full_shard
auto_wrap"``, Transformers 5), each with the plugin's fast paths as they are and with one
of them turned off, and the same script on one card, and prints side by side, for rank 0:

- launches a step (the emulator's counter, the steps between the first and the last) with
  the training graphs on and off (``HPU_PLUGIN_FAST_TRAIN_GRAPHS=0``), and their ratio;
- the device memory held just before each optimizer step (the gradients are there then)
  with DDP's gradients as views of its buckets and apart from them
  (``HPU_PLUGIN_FAST_BUCKET_VIEWS=0``), their difference against the gradients' size;
- the last logged loss of each arm, which must agree within each of DDP and FSDP 2 (the
  fast paths change no result; FSDP 2 keeps the parameters in bf16, so its losses are its
  own).

    python bench/cards.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = r"""
import json, os, sys, torch
import torch.distributed as dist
from hpu_emulator import counters
from transformers import (LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback,
                          TrainingArguments)

class Rows(torch.utils.data.Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        ids = torch.tensor([3 + (i * 37 + j * 11) % 250 for j in range(64)])
        return {"input_ids": ids, "labels": ids.clone()}

class Count(TrainerCallback):
    def __init__(self):
        self.launches, self.held, self.losses = [], [], []
    def on_step_begin(self, args, state, control, **kwargs):
        self.start = counters.snapshot()["launches"]
    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.held.append(torch.hpu.memory_allocated())
    def on_step_end(self, args, state, control, **kwargs):
        self.launches.append(counters.snapshot()["launches"] - self.start)
    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses.append(logs["loss"])

torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(
    vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
    pad_token_id=0))
gradients = sum(p.numel() * p.element_size() for p in model.parameters())
sharded = {"fsdp": "full_shard auto_wrap",
           "fsdp_config": {"transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]}}
count = Count()
args = TrainingArguments(output_dir=sys.argv[1] + "/out", max_steps=8,
                         per_device_train_batch_size=4, learning_rate=1e-3, bf16=True,
                         max_grad_norm=1.0, report_to=[], save_strategy="no", logging_steps=1,
                         seed=0, disable_tqdm=True,
                         **(sharded if os.environ.get("FSDP") else {}))
Trainer(model=model, args=args, train_dataset=Rows(), callbacks=[count]).train()
if dist.get_rank() == 0:
    with open(sys.argv[1] + "/result.json", "w") as out:
        json.dump({"launches": count.launches[1:-1], "held": count.held[1:-1],
                   "loss": count.losses[-1], "gradients": gradients}, out)
"""

ARMS = {
    "one card": {"CARDS": "1"},
    "ddp": {},
    "ddp, graphs off": {"HPU_PLUGIN_FAST_TRAIN_GRAPHS": "0"},
    "ddp, gradients apart": {"HPU_PLUGIN_FAST_BUCKET_VIEWS": "0"},
    "fsdp 2": {"FSDP": "1"},
    "fsdp 2, graphs off": {"FSDP": "1", "HPU_PLUGIN_FAST_TRAIN_GRAPHS": "0"},
}


def run_arm(env: dict[str, str]) -> dict[str, object]:
    """One arm under ``torchrun`` on two emulated cards (``CARDS``: another number); rank
    0's numbers."""
    env = dict(env)
    with tempfile.TemporaryDirectory() as directory:
        script = Path(directory) / "train.py"
        script.write_text(SCRIPT)
        cards = env.pop("CARDS", "2")
        child = {**os.environ, "HPU_PLUGIN_EMULATE": "1", "HPU_PLUGIN_EMULATE_DEVICES": cards,
                 "TRANSFORMERS_VERBOSITY": "error", "OMP_NUM_THREADS": "1", **env}
        done = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone",
             "--nproc_per_node", cards, str(script), directory],
            env=child, cwd=ROOT, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            sys.exit(f"arm failed ({env}):\n{done.stderr[-4000:]}")
        return json.loads((Path(directory) / "result.json").read_text())


def main() -> None:
    results = {name: run_arm(env) for name, env in ARMS.items()}
    print(f"{'arm':<22} {'launches a step':>16} {'held before step (B)':>21} {'last loss':>10}")
    for name, result in results.items():
        print(f"{name:<22} {max(result['launches']):>16} {max(result['held']):>21} "
              f"{result['loss']:>10.4f}")
    print(f"ddp: launches a step on each of two cards / on one card: "
          f"{max(results['ddp']['launches']) / max(results['one card']['launches']):.2f}")
    for kind in ("ddp", "fsdp 2"):
        on, off = results[kind], results[f"{kind}, graphs off"]
        print(f"{kind}: launches with graphs / without: "
              f"{max(on['launches']) / max(off['launches']):.2f}")
    views, apart = results["ddp"], results["ddp, gradients apart"]
    saved = max(apart["held"]) - max(views["held"])
    print(f"ddp: memory held before the optimizer step, views / apart: "
          f"{max(views['held']) / max(apart['held']):.2f} ({saved} bytes less; the "
          f"gradients are {views['gradients']} bytes)")
    for kind in ("ddp", "fsdp 2"):  # FSDP 2 keeps its parameters in bf16: its own losses
        losses = [float(r["loss"]) for name, r in results.items()  # type: ignore[arg-type]
                  if name.split(",")[0] == kind]
        agree = max(losses) - min(losses) <= 1e-2 * max(losses)
        print(f"{kind}: last losses agree within 1%: {agree} {losses}")


if __name__ == "__main__":
    main()
