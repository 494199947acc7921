"""Device launches with and without Gaudi's fast paths, on the emulated Gaudi, in one run.

A tiny Llama, eager (not compiled), as unchanged Transformers code runs it: launches and
host synchronisations per ``Trainer`` step (AdamW, ``max_grad_norm=1.0``, batch 2, rows of
random lengths) and per generated token (greedy ``generate()``, its prefill included, after
a first call that compiles), counted by the emulator
(``hpu_emulator.counters``: what a Gaudi would launch in eager mode), with every fast
path off (``HPU_PLUGIN_FAST=0``), each one alone, and all on; then the padding of the
``Trainer``'s bucketed batches with and without rows of similar length batched together,
and the launches of one MoE layer (tiny Mixtral) with ``batched_mm`` and the fused kernel.
Losses and tokens of each arm are compared with the all-off arm. Run:
``python bench/fast_paths.py`` (``--steps``, ``--tokens`` to shorten). Times on a CPU say
nothing about Gaudi; launch counts do.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

os.environ.setdefault("HPU_PLUGIN_EMULATE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch
from training_rows import Rows, collate
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

from hpu_emulator import counters
from hpu_plugin.fast_paths.decisions import FAST_PATHS, SWITCH


def tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
        pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )
    return LlamaForCausalLM(config).to("hpu")


class PerStep(TrainerCallback):
    """Launches and syncs of each step after the first (the first creates optimizer state)."""

    def __init__(self) -> None:
        self.steps: list[dict[str, int]] = []
        self.losses: list[float] = []
        self.start: dict[str, int] = {}

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.start = counters.snapshot()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        end = counters.snapshot()
        self.steps.append({k: end[k] - self.start[k] for k in ("launches", "syncs")})

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None,
               **kwargs: Any) -> None:
        if logs and "loss" in logs:
            self.losses.append(float(logs["loss"]))


def training(steps: int) -> dict[str, float | list[float]]:
    seen = PerStep()
    args = TrainingArguments(
        output_dir="/tmp/hpu-plugin-bench-fast", max_steps=steps, per_device_train_batch_size=2,
        learning_rate=1e-3, max_grad_norm=1.0, report_to=[], save_strategy="no",
        logging_steps=1, disable_tqdm=True, use_cpu=False, seed=0,
    )
    os.environ["HPU_PLUGIN_BUCKETS_GROUP"] = "0"  # the same batches in every arm
    Trainer(model=tiny_llama().train(), args=args, train_dataset=Rows(steps * 2),
            data_collator=collate, callbacks=[seen]).train()
    later = seen.steps[1:] or seen.steps
    return {"launches": sum(s["launches"] for s in later) / len(later),
            "syncs": sum(s["syncs"] for s in later) / len(later), "losses": seen.losses}


def generation(tokens: int) -> dict[str, float | list[int]]:
    model = tiny_llama().eval()
    prompt = torch.tensor([[1, 5, 9, 14, 27, 33, 41, 52]]).to("hpu")
    with torch.no_grad():
        for _ in range(2):  # the first call compiles (with graphs), the second is measured
            counters.reset()
            out = model.generate(prompt, max_new_tokens=tokens, min_new_tokens=tokens,
                                 do_sample=False)
    now = counters.snapshot()
    return {"launches": now["launches"] / tokens, "syncs": now["syncs"] / tokens,
            "tokens": out[0].tolist()}


def arm(name: str, steps: int, tokens: int) -> dict[str, object]:
    for path in FAST_PATHS:
        os.environ.pop(path.setting, None)
    if name == "all off":
        os.environ[SWITCH] = "0"
    elif name == "all on":
        os.environ[SWITCH] = "1"
    else:
        os.environ[SWITCH] = "0"
        os.environ[next(p.setting for p in FAST_PATHS if p.name == name)] = "1"
    return {"train": training(steps), "generate": generation(tokens)}


def padding(steps: int) -> dict[str, float]:
    """Padded / real tokens of the batches a compiled Trainer's dataloader gives, bucketed."""
    result = {}
    for label, group in (("random batches", "0"), ("rows of similar length", "1")):
        os.environ["HPU_PLUGIN_BUCKETS_GROUP"] = group
        data = Rows(steps * 2, 4, 500)
        args = TrainingArguments(output_dir="/tmp/hpu-plugin-bench-fast", max_steps=steps,
                                 per_device_train_batch_size=2, torch_compile=True,
                                 report_to=[], save_strategy="no", use_cpu=False, seed=0)
        trainer = Trainer(model=tiny_llama(), args=args, train_dataset=data,
                          data_collator=collate)
        padded = sum(int(b["input_ids"].numel()) for b in trainer.get_train_dataloader())
        real = sum(data.lengths)
        result[label] = (padded - real) / real
    return result


def moe_forward() -> dict[str, dict[str, float]]:
    """Launches of one MoE layer's experts in a forward without gradients (tiny Mixtral,
    prompt of 8 tokens, every other fast path off): ``batched_mm`` (``fused_moe`` off) and
    the fused kernel (on), with the largest difference of the two models' logits."""
    from transformers import MixtralConfig, MixtralForCausalLM

    result: dict[str, dict[str, float]] = {}
    logits = {}
    for label, switch in (("batched_mm", "0"), ("fused_moe", "1")):
        for path in FAST_PATHS:
            os.environ.pop(path.setting, None)
        os.environ[SWITCH], os.environ["HPU_PLUGIN_FAST_MOE"] = "0", switch
        torch.manual_seed(0)
        model = MixtralForCausalLM(MixtralConfig(
            vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, num_local_experts=8,
            num_experts_per_tok=2)).to("hpu").eval()
        seen: list[int] = []
        start: dict[str, int] = {}

        def before(module: Any, args: Any, start: dict[str, int] = start) -> None:
            start.update(counters.snapshot())

        def after(module: Any, args: Any, output: Any, seen: list[int] = seen,
                  start: dict[str, int] = start) -> None:
            seen.append(counters.snapshot()["launches"] - start["launches"])

        for layer in model.model.layers:
            layer.mlp.experts.register_forward_pre_hook(before)
            layer.mlp.experts.register_forward_hook(after)
        with torch.no_grad():
            logits[label] = model(torch.tensor([[1, 5, 9, 14, 27, 33, 41, 52]]).to("hpu")
                                  ).logits.cpu()
        result[label] = {"launches": sum(seen) / len(seen),
                         "chosen": model.config._experts_implementation}
    result["fused_moe"]["max_logit_diff"] = float(
        (logits["fused_moe"] - logits["batched_mm"]).abs().max())
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--padding-steps", type=int, default=200)
    args = parser.parse_args(argv)

    names = ["all off", *(p.name for p in FAST_PATHS), "all on"]
    results = {name: arm(name, args.steps, args.tokens) for name in names}
    base = results["all off"]
    print(f"tiny Llama, eager; Trainer: batch 2, AdamW, max_grad_norm=1.0, {args.steps} steps; "
          f"generate: greedy, {args.tokens} new tokens")
    print(f"  {'fast paths':<18}{'launches/step':>14}{'ratio':>7}{'syncs/step':>11}"
          f"{'launches/token':>16}{'ratio':>7}{'syncs/token':>12}  losses, tokens")
    for name, r in results.items():
        t, g = r["train"], r["generate"]
        worst = max((abs(a - b) / max(abs(b), 1e-12) for a, b in
                     zip(t["losses"], base["train"]["losses"], strict=True)), default=0.0)
        same = "same tokens" if g["tokens"] == base["generate"]["tokens"] else "TOKENS DIFFER"
        print(f"  {name:<18}{t['launches']:>14.0f}{t['launches'] / base['train']['launches']:>7.2f}"
              f"{t['syncs']:>11.1f}{g['launches']:>16.0f}"
              f"{g['launches'] / base['generate']['launches']:>7.2f}{g['syncs']:>12.1f}"
              f"  max loss diff {worst:.1e}, {same}")
    moe = moe_forward()
    print("tiny Mixtral (8 experts, top 2), forward without gradients, 8 tokens: launches per "
          "MoE layer's experts")
    for label, r in moe.items():
        extra = f", max logit diff {r['max_logit_diff']:.1e}" if "max_logit_diff" in r else ""
        print(f"  {label:<18}{r['launches']:>7.0f}  ({r['chosen']}{extra})")
    pad = padding(args.padding_steps)
    print(f"Trainer batches bucketed (torch_compile=True), {args.padding_steps} steps, batch 2, "
          "lengths 4..500: padding (padded / real tokens)")
    for label, value in pad.items():
        print(f"  {label:<24}{value:>7.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
