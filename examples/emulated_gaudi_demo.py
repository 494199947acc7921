"""Unchanged Hugging Face code on an emulated Gaudi: no hpu_plugin import anywhere.

    HPU_PLUGIN_EMULATE=1 python examples/emulated_gaudi_demo.py

The first run compiles the emulator (about a minute; ``python -m hpu_plugin.emulation build``
does it ahead of time). The script builds a tiny Llama from a config, loads it on ``hpu``,
generates greedily, then trains a few bf16 steps with Trainer -- the same code a Gaudi user
runs on hardware.
"""

import subprocess
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    Trainer,
    TrainingArguments,
)


class RandomTokens(Dataset):
    def __len__(self) -> int:
        return 32

    def __getitem__(self, i: int) -> dict:
        ids = torch.randint(0, 1000, (32,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def main() -> None:
    if not hasattr(torch, "hpu"):
        raise SystemExit("no torch.hpu: set HPU_PLUGIN_EMULATE=1 (or run on a Gaudi machine)")
    print(f"{torch.hpu.device_count()} x {torch.hpu.get_device_name()}")
    print(subprocess.run(["hl-smi", "-Q", "index,module_id", "-f", "csv"],
                         capture_output=True, text=True).stdout)

    path = tempfile.mkdtemp()
    config = LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=128, vocab_size=1000)
    LlamaForCausalLM(config).save_pretrained(path)

    model = AutoModelForCausalLM.from_pretrained(path, device_map="hpu")
    prompt = torch.randint(0, 1000, (1, 8), device="hpu")
    print("generated:", model.generate(prompt, max_new_tokens=8, do_sample=False).tolist())

    args = TrainingArguments(output_dir=tempfile.mkdtemp(), max_steps=5, bf16=True,
                             per_device_train_batch_size=4, logging_steps=1, report_to=[],
                             save_strategy="no")
    print("Trainer device:", args.device)
    Trainer(model=AutoModelForCausalLM.from_pretrained(path), args=args,
            train_dataset=RandomTokens()).train()
    print(f"peak device memory: {torch.hpu.max_memory_allocated() / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
