"""Gaudi fp8 against bf16 for unchanged Transformers code, side by side on the emulator.

Two tiny causal LMs built from configs, a Llama and a Qwen3 (2 layers, hidden 128,
vocabulary 128), are each taught a next-token rule on the CPU (a fixed permutation of the
vocabulary: after token ``t`` comes ``perm[t]``), so that their greedy tokens mean something
and rounding does not flip near-ties of a random model. Then, in one emulated process per
Gaudi generation, each model is loaded with ``from_pretrained`` three times, as a Gaudi user
runs it: in bf16; with ``GaudiFp8Config(path, mode="measure")`` on calibration rows (Intel
Neural Compressor's measure run, written with ``finish_measurement``); with
``GaudiFp8Config(path, mode="quantize")`` (every linear an fp8 ``PatchedLinear``). Printed
for bf16 and fp8:

- greedy tokens: the share of fp8's tokens equal to bf16's (8 prompts x 16 new tokens), and
  the share of each that follows the taught rule;
- logits: the largest difference from bf16 over the bf16 greedy sequences, absolute and over
  the largest bf16 logit;
- weights: device bytes ``from_pretrained`` added (``torch.hpu.memory_allocated``, the
  emulator's memory statistics), all of them and the linears' alone;
- device launches per generated token (``hpu_emulator.counters``; the second of two
  ``generate`` calls, prefill included), with the plugin's defaults (decoding steps as
  compiled graphs, ``inference_graphs``) and, from models loaded again, with those graphs off
  (``HPU_PLUGIN_FAST_GRAPHS=0``: one launch per op, where each fp8 linear is a cast of its
  input and an fp8 GEMM).

Run: ``python bench/fp8.py`` (``--generations gaudi2``, ``--steps``, ``--tokens`` to
shorten). Times on a CPU say nothing about Gaudi and none is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

VOCAB = 128
SIZES = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": VOCAB,
         "max_position_embeddings": 64, "bos_token_id": 1, "eos_token_id": None,
         "pad_token_id": 0}
MODELS = ("llama", "qwen3")
#: The plugin's switch of its decoding graphs (``fast_paths.decisions``).
GRAPHS_SWITCH = "HPU_PLUGIN_FAST_GRAPHS"


def _config(kind: str) -> Any:
    from transformers import LlamaConfig, Qwen3Config

    if kind == "llama":
        return LlamaConfig(**SIZES)
    return Qwen3Config(head_dim=32, tie_word_embeddings=False, **SIZES)


def _rows(perm: Any, n: int, length: int, generator: Any) -> Any:
    import torch

    tokens = [torch.randint(0, VOCAB, (n,), generator=generator)]
    for _ in range(length - 1):
        tokens.append(perm[tokens[-1]])
    return torch.stack(tokens, 1)


def teach(kind: str, path: str, steps: int) -> float:
    """Build ``kind`` from its config, teach it the permutation on the CPU, save it."""
    import torch
    from transformers import AutoModelForCausalLM

    generator = torch.Generator().manual_seed(0)
    perm = torch.randperm(VOCAB, generator=generator)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(_config(kind))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loss = torch.tensor(0.0)
    for _ in range(steps):
        batch = _rows(perm, 32, 24, generator)
        loss = model(batch, labels=batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.save_pretrained(path)
    torch.save(perm, os.path.join(path, "perm.pt"))
    return float(loss.detach())


def _load(path: str, config: Any) -> tuple[Any, int, int]:
    """The model, the device bytes its load added, and the bytes of its linears' weights."""
    import torch
    from transformers import AutoModelForCausalLM

    before = torch.hpu.memory_allocated()
    kwargs = {"quantization_config": config} if config is not None else {}
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, **kwargs)
    if config is None:
        model = model.to("hpu")
    total = torch.hpu.memory_allocated() - before
    linears = sum(m.weight.numel() * m.weight.element_size()
                  for name, m in model.named_modules() if name.endswith(("_proj", "lm_head")))
    return model.eval(), total, linears


def _generate(model: Any, prompts: list[Any], tokens: int) -> tuple[list[list[int]], float]:
    """Greedy tokens per prompt, and device launches per generated token of the second pass
    (the first compiles what the fast paths compile)."""
    import torch

    from hpu_emulator import counters

    new: list[list[int]] = []
    for _ in range(2):
        counters.reset()
        new = []
        with torch.no_grad():
            for prompt in prompts:
                out = model.generate(prompt.to("hpu"), max_new_tokens=tokens,
                                     min_new_tokens=tokens, do_sample=False)
                new.append(out[0, prompt.shape[1]:].cpu().tolist())
    launches = counters.snapshot()["launches"] / (tokens * len(prompts))
    return new, launches


def _logits(model: Any, sequences: list[list[int]]) -> list[Any]:
    import torch

    with torch.no_grad():
        return [model(torch.tensor([s], device="hpu")).logits.float().cpu()[0]
                for s in sequences]


def measure_model(kind: str, path: str, work: str, tokens: int) -> dict[str, Any]:
    """bf16, the measure run and the fp8 run of one saved model, in this emulated process."""
    import gc

    import torch

    from hpu_plugin.fp8 import GaudiFp8Config, finish_measurement

    perm = torch.load(os.path.join(path, "perm.pt"))
    generator = torch.Generator().manual_seed(1)
    prompts = [_rows(perm, 1, n, generator) for n in (3, 5, 8, 4, 6, 7, 2, 9)]
    calib = [_rows(perm, 4, 16, generator) for _ in range(4)]
    generation = os.environ.get("HPU_PLUGIN_EMULATE", "gaudi2")
    stats = os.path.join(work, f"measurement-{generation}", kind, "measure")
    result: dict[str, Any] = {}

    model, total, linears = _load(path, None)
    ref_tokens, launches = _generate(model, prompts, tokens)
    sequences = [p[0].tolist() + t for p, t in zip(prompts, ref_tokens, strict=True)]
    ref_logits = _logits(model, sequences)
    result["bf16"] = {"bytes": total, "linear_bytes": linears, "launches": launches,
                      "tokens": ref_tokens}
    del model
    gc.collect()

    model, _, _ = _load(path, GaudiFp8Config(stats, mode="measure"))
    with torch.no_grad():
        for batch in calib:
            model(batch.to("hpu"))
    finish_measurement(model)
    del model
    gc.collect()

    model, total, linears = _load(path, GaudiFp8Config(stats, mode="quantize"))
    fp8_tokens, launches = _generate(model, prompts, tokens)
    fp8_logits = _logits(model, sequences)
    err = max((a - b).abs().max().item() for a, b in zip(fp8_logits, ref_logits, strict=True))
    peak = max(b.abs().max().item() for b in ref_logits)
    result["fp8"] = {"bytes": total, "linear_bytes": linears, "launches": launches,
                     "tokens": fp8_tokens, "logits_err": err, "logits_peak": peak,
                     "weight_dtype": str(model.model.layers[0].mlp.down_proj.weight.dtype),
                     "module": type(model.model.layers[0].mlp.down_proj).__name__}
    del model
    gc.collect()

    # with the decoding graphs off: every op a launch (the decision is taken per model load)
    os.environ[GRAPHS_SWITCH] = "0"  # the parent gave this process no HPU_PLUGIN_FAST*
    for arm, config in (("bf16", None), ("fp8", GaudiFp8Config(stats, mode="quantize"))):
        model, _, _ = _load(path, config)
        result[arm]["eager_launches"] = _generate(model, prompts, tokens)[1]
        del model
        gc.collect()
    del os.environ[GRAPHS_SWITCH]
    result["perm"] = perm.tolist()
    result["prompts"] = [p[0].tolist() for p in prompts]
    return result


def child(work: str) -> int:
    """Runs in the emulated process: every model, bf16 then fp8."""
    results = {kind: measure_model(kind, os.path.join(work, kind), work, TOKENS[0])
               for kind in MODELS}
    print("RESULT" + json.dumps(results))
    return 0


TOKENS = [16]


def _follows_rule(prompt: list[int], new: list[int], perm: list[int]) -> float:
    sequence = prompt + new
    hits = sum(sequence[i + 1] == perm[sequence[i]]
               for i in range(len(prompt) - 1, len(sequence) - 1))
    return hits / len(new)


def _print(generation: str, results: dict[str, Any]) -> None:
    print(f"\n{generation}: bf16 | fp8 (Neural Compressor via GaudiFp8Config), "
          f"{len(results[MODELS[0]]['prompts'])} prompts x {TOKENS[0]} greedy tokens")
    head = (f"  {'model':<7}{'tokens = bf16':>14}{'rule bf16/fp8':>15}{'logits err/peak':>22}"
            f"{'weights fp8/bf16':>26}{'linears fp8/bf16':>24}{'launches/token':>18}"
            f"{'graphs off':>18}")
    print(head)
    for kind in MODELS:
        r = results[kind]
        bf16, fp8 = r["bf16"], r["fp8"]
        pairs = [(a, b) for x, y in zip(fp8["tokens"], bf16["tokens"], strict=True)
                 for a, b in zip(x, y, strict=True)]
        agree = sum(a == b for a, b in pairs) / len(pairs)
        rule = [sum(_follows_rule(p, t, r["perm"]) for p, t in zip(r["prompts"], arm["tokens"],
                                                                     strict=True))
                / len(r["prompts"]) for arm in (bf16, fp8)]
        err, peak = fp8["logits_err"], fp8["logits_peak"]
        print(f"  {kind:<7}{agree:>13.1%} {rule[0]:>7.0%}/{rule[1]:<6.0%}"
              f"{err:>9.3f}/{peak:<6.2f}({err / peak:5.1%})"
              f"{fp8['bytes']:>9,}/{bf16['bytes']:<9,}({fp8['bytes'] / bf16['bytes']:.2f})"
              f"{fp8['linear_bytes']:>8,}/{bf16['linear_bytes']:<8,}"
              f"({fp8['linear_bytes'] / bf16['linear_bytes']:.2f})"
              f"{fp8['launches']:>8.1f}/{bf16['launches']:<6.1f}"
              f"({fp8['launches'] / bf16['launches']:.2f})"
              f"{fp8['eager_launches']:>7.0f}/{bf16['eager_launches']:<4.0f}"
              f"({fp8['eager_launches'] / bf16['eager_launches']:.2f})")
        print(f"  {'':<7}fp8 linears: {fp8['module']} with {fp8['weight_dtype']} weights")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", default="gaudi2,gaudi3")
    parser.add_argument("--steps", type=int, default=100, help="teaching steps per model")
    parser.add_argument("--tokens", type=int, default=16, help="greedy tokens per prompt")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    TOKENS[0] = args.tokens
    if args.child:
        return child(args.child)
    with tempfile.TemporaryDirectory(prefix="hpu-plugin-bench-fp8-") as work:
        for kind in MODELS:
            loss = teach(kind, os.path.join(work, kind), args.steps)
            print(f"{kind}: taught on the CPU, {args.steps} steps, last loss {loss:.4f}")
        for generation in args.generations.split(","):
            # the plugin's defaults: a fast-path switch the caller exported is left out
            env = {**{k: v for k, v in os.environ.items()
                      if not k.startswith("HPU_PLUGIN_FAST")},
                   "HPU_PLUGIN_EMULATE": generation,
                   "TRANSFORMERS_VERBOSITY": "error",
                   # an empty recipe cache per run: every run compiles as a first one
                   "PT_HPU_RECIPE_CACHE_CONFIG": f"{work}/recipes-{generation},true,1024"}
            done = subprocess.run(
                [sys.executable, __file__, "--child", work, "--tokens", str(args.tokens)],
                env=env, capture_output=True, text=True, check=False)
            lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
            if done.returncode != 0 or not lines:
                print(done.stdout[-2000:], done.stderr[-4000:], file=sys.stderr)
                return 1
            _print(generation, json.loads(lines[-1][len("RESULT"):]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
