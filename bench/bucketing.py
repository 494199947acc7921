"""Graph compilations with and without shape buckets, on the emulated Gaudi, in one run.

Greedy generation with a compiled tiny Llama over 64 prompts of random lengths 1..512, 32
new tokens each, one prompt per call; then 200 Trainer steps (``torch_compile=True``, batch
2) over rows of random lengths 4..500, with and without buckets. Prints Gaudi's own count
(``metric_global("graph_compilation")``) for each arm side by side, the training count per
graph (AOT autograd gives the bridge a forward and a backward graph, each compiled per
shape), and the padding overhead (padded tokens / real tokens). Run:
``python bench/bucketing.py`` (``--prompts``, ``--steps`` to shorten; ``--prompts 0`` for
training only). The emulator is turned on for this process.

Without buckets dynamo traces the varying lengths with symbolic sizes after its first
recompile, and the bridge compiles such a dynamic graph into ranged recipes; the emulator
models both (packages/hpu-emulator/README.md).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

os.environ.setdefault("HPU_PLUGIN_EMULATE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("PT_HPU_METRICS_GC_DETAILS", "1")  # the recipe names: forward/backward
# a first run's compilations: with the plugin's recipe cache on disk a second run of this
# script would read every recipe back and count none
os.environ.setdefault("PT_HPU_RECIPE_CACHE_CONFIG", "")

import torch
import torch._dynamo
from habana_frameworks.torch.hpu.metrics import metric_global
from transformers import LlamaConfig, LlamaForCausalLM

GC = metric_global("graph_compilation")


def count() -> int:
    return int(dict(GC.stats())["TotalNumber"])


def per_graph(since: int) -> dict[str, int]:
    """Compilations since the ``since``-th recipe, by graph kind (the emulator names its
    recipes ``fwd_...``/``bwd_...``; the list survives ``reset()``, as in the bridge)."""
    recipes = dict(GC.stats()).get("recipe", [])[since:]
    kinds = {"forward": 0, "backward": 0}
    for name, _ in recipes:
        kinds["backward" if name.startswith("bwd") else "forward"] += 1
    return kinds


def recipes_so_far() -> int:
    return len(dict(GC.stats()).get("recipe", []))


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
    from hpu_plugin.gaudi.shape_buckets import bucket_for
    from hpu_plugin.registry import get_registry

    buckets = get_registry().shape_buckets("length", 1024) or ()
    padded = [bucket_for(n, buckets) for n in lengths]
    return (sum(padded) - sum(lengths)) / sum(lengths), sorted(set(padded))


def training(steps: int) -> dict[str, object]:
    from training_rows import Rows, collate
    from transformers import Trainer, TrainerCallback, TrainingArguments

    class Lengths(TrainerCallback):
        """The padded lengths the model saw and the real tokens, per arm."""

        def __init__(self) -> None:
            self.shapes: set[tuple[int, ...]] = set()
            self.padded = self.real = 0

    results: dict[str, object] = {}
    for arm, switch in (("without buckets", "0"), ("with buckets", "1")):
        os.environ["HPU_PLUGIN_BUCKETS"] = switch
        torch._dynamo.reset()
        model = tiny_llama("sdpa").train()
        args = TrainingArguments(
            output_dir="/tmp/hpu-plugin-bench-bucketing", max_steps=steps,
            per_device_train_batch_size=2, torch_compile=True, report_to=[], save_strategy="no",
            logging_strategy="no", dataloader_drop_last=True, use_cpu=False,
            disable_tqdm=True,
        )
        seen = Lengths()
        trainer = Trainer(model=model, args=args, train_dataset=Rows(steps * 2, 4, 500),
                          data_collator=collate, callbacks=[seen])
        inner = trainer.data_collator

        def counting(features: list[dict[str, list[int]]], inner=inner, seen=seen) -> object:
            batch = inner(features)
            seen.shapes.add(tuple(batch["input_ids"].shape))
            seen.padded += batch["input_ids"].numel()
            seen.real += sum(len(f["input_ids"]) for f in features)
            return batch

        trainer.data_collator = counting
        GC.reset()
        since = recipes_so_far()
        start = time.perf_counter()
        trainer.train()
        results[arm] = {
            "compilations": count(), "seconds": time.perf_counter() - start,
            "graphs": per_graph(since), "shapes": len(seen.shapes),
            "overhead": (seen.padded - seen.real) / max(seen.real, 1),
        }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--steps", type=int, default=200)
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
    if not args.steps:
        return 0
    train = training(args.steps)
    from hpu_plugin.registry import get_registry

    buckets = [b for b in get_registry().shape_buckets("length", 1024) or () if b <= 512]
    off, on = train["without buckets"], train["with buckets"]
    print(f"Trainer: {args.steps} steps, batch 2, lengths 4..500, torch_compile=True")
    print(f"  {'':34}{'without buckets':>18}{'with buckets':>16}")
    rows = (
        ("graph compilations", "compilations", "{}"),
        ("  forward graph", None, "forward"),
        ("  backward graph", None, "backward"),
        ("distinct batch shapes", "shapes", "{}"),
        ("padding overhead (padded / real)", "overhead", "{:.1%}"),
        ("seconds", "seconds", "{:.0f}"),
    )
    for label, key, form in rows:
        if key is None:
            a, b = off["graphs"][form], on["graphs"][form]  # type: ignore[index]
        else:
            a, b = form.format(off[key]), form.format(on[key])  # type: ignore[index]
        print(f"  {label:34}{a!s:>18}{b!s:>16}")
    print(f"  length buckets up to 512: {len(buckets)} {buckets}; per graph, compilations with "
          f"buckets: forward {on['graphs']['forward']}, backward {on['graphs']['backward']} "
          f"(goal: at most {len(buckets)} each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
