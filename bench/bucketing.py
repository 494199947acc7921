"""Graph compilations with and without shape buckets, on the emulated Gaudi, in one run.

Greedy generation with a compiled tiny Llama over 64 prompts of random lengths 1..512, 32
new tokens each, one prompt per call; then Trainer steps over batches of random lengths.
Prints Gaudi's own count (``metric_global("graph_compilation")``) for each arm and the
padding overhead (padded tokens / real tokens). Run: ``python bench/bucketing.py``
(``--prompts``, ``--steps`` to shorten). The emulator is turned on for this process.

The model uses eager attention: tracing ``scaled_dot_product_attention`` with symbolic
shapes fails on the emulator (see hpu_plugin/emulation/README.md), and without buckets
dynamo traces the varying shapes symbolically; Gaudi compiles a recipe per concrete shape
either way, which is what is counted.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

os.environ.setdefault("HPU_PLUGIN_EMULATE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch
import torch._dynamo
from habana_frameworks.torch.hpu.metrics import metric_global
from transformers import LlamaConfig, LlamaForCausalLM

GC = metric_global("graph_compilation")


def count() -> int:
    return int(dict(GC.stats())["TotalNumber"])


def tiny_llama(attention: str = "eager") -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
        pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )
    config._attn_implementation = attention
    return LlamaForCausalLM(config).eval().to("hpu")


def generation(prompts: int, new_tokens: int) -> dict[str, object]:
    rng = random.Random(0)
    lengths = [rng.randint(1, 512) for _ in range(prompts)]
    inputs = [torch.randint(3, 256, (1, n)).to("hpu") for n in lengths]
    results: dict[str, object] = {"lengths": lengths}
    outputs = {}
    for arm, switch in (("without buckets", "0"), ("with buckets", "1")):
        os.environ["HPU_PLUGIN_BUCKETS"] = switch
        torch._dynamo.reset()
        model = tiny_llama()
        model.compile()
        GC.reset()
        start = time.perf_counter()
        outs = [model.generate(ids, max_new_tokens=new_tokens, do_sample=False,
                               min_new_tokens=new_tokens) for ids in inputs]
        results[arm] = (count(), time.perf_counter() - start)
        outputs[arm] = [o.cpu() for o in outs]
    results["same tokens"] = all(
        torch.equal(a, b)
        for a, b in zip(outputs["without buckets"], outputs["with buckets"], strict=True)
    )
    return results


def padding_overhead(lengths: list[int]) -> tuple[float, list[int]]:
    from hpu_plugin.gaudi.shapes import bucket_for
    from hpu_plugin.registry import get_registry

    buckets = get_registry().shape_buckets("length", "hpu", 1024) or ()
    padded = [bucket_for(n, buckets) for n in lengths]
    return (sum(padded) - sum(lengths)) / sum(lengths), sorted(set(padded))


def training(steps: int, unbucketed_steps: int) -> dict[str, object]:
    from torch.utils.data import Dataset
    from transformers import Trainer, TrainingArguments

    class Texts(Dataset):
        def __init__(self) -> None:
            rng = random.Random(1)
            self.rows = [rng.randint(4, 500) for _ in range(steps * 2)]

        def __len__(self) -> int:
            return len(self.rows)

        def __getitem__(self, i: int) -> dict[str, list[int]]:
            ids = [3 + (i * 7 + j) % 250 for j in range(self.rows[i])]
            return {"input_ids": ids, "labels": ids}

    def collate(features: list[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
        longest = max(len(f["input_ids"]) for f in features)
        ids = torch.zeros((len(features), longest), dtype=torch.long)
        mask = torch.zeros_like(ids)
        labels = torch.full_like(ids, -100)
        for row, f in enumerate(features):
            n = len(f["input_ids"])
            ids[row, :n] = torch.tensor(f["input_ids"])
            mask[row, :n] = 1
            labels[row, :n] = torch.tensor(f["labels"])
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}

    results: dict[str, object] = {}
    for arm, switch, arm_steps in (("without buckets", "0", unbucketed_steps),
                                   ("with buckets", "1", steps)):
        os.environ["HPU_PLUGIN_BUCKETS"] = switch
        torch._dynamo.reset()
        model = tiny_llama("sdpa").train()  # static graphs here; eager attention's
        # backward fails on the emulator's fallback
        args = TrainingArguments(
            output_dir="/tmp/hpu-plugin-bench-bucketing", max_steps=arm_steps,
            per_device_train_batch_size=2, torch_compile=True, report_to=[], save_strategy="no",
            logging_strategy="no", dataloader_drop_last=True, use_cpu=False,
        )
        trainer = Trainer(model=model, args=args, train_dataset=Texts(), data_collator=collate)
        GC.reset()
        start = time.perf_counter()
        trainer.train()
        results[arm] = (count(), time.perf_counter() - start, arm_steps)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--unbucketed-steps", type=int, default=20)
    args = parser.parse_args(argv)

    if not args.prompts:
        return train_report(args)
    gen = generation(args.prompts, args.new_tokens)
    overhead, used = padding_overhead(gen["lengths"])  # type: ignore[arg-type]
    off, on = gen["without buckets"], gen["with buckets"]
    print(f"generate: {args.prompts} prompts, lengths 1..512, {args.new_tokens} new tokens")
    print(f"  graph compilations without buckets: {off[0]} ({off[1]:.0f} s)")
    print(f"  graph compilations with buckets:    {on[0]} ({on[1]:.0f} s)")
    print(f"  ratio: {off[0] / max(on[0], 1):.1f}x fewer; length buckets in use: {used}")
    print(f"  compilations per bucket in use: {on[0] / len(used):.2f}")
    print(f"  padding overhead (padded / real tokens): {overhead:.1%}")
    print(f"  generated tokens identical: {gen['same tokens']}")
    return train_report(args) if args.steps else 0


def train_report(args: argparse.Namespace) -> int:
    if args.steps:
        train = training(args.steps, args.unbucketed_steps)
        off, on = train["without buckets"], train["with buckets"]
        print("Trainer: batch 2, lengths 4..500, forward and backward graphs counted")
        print(f"  without buckets: {off[0]} compilations in {off[2]} steps ({off[1]:.0f} s)")
        print(f"  with buckets:    {on[0]} compilations in {on[2]} steps ({on[1]:.0f} s); "
              f"{on[0] / 2:.0f} shapes, length buckets up to 512: 5")
    return 0


if __name__ == "__main__":
    sys.exit(main())
