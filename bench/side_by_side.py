"""hpu-plugin and optimum-habana side by side on the emulated Gaudi, counted in one run.

The same tiny Llama (2 layers, hidden 64, grouped-query heads; one set of weights, made
here) run the way each project's users run it:

- hpu-plugin: unchanged Transformers 5 code in this interpreter's environment, the plugin's
  defaults (eager mode): ``model.generate(...)`` and a ``Trainer`` with ``bf16=True``;
- optimum-habana 1.21.2 in its own environment (``.venv-optimum``, from
  ``requirements/optimum-habana.txt``; its Transformers 4.55), lazy mode, as its examples
  run: ``adapt_transformers_to_gaudi()``, ``wrap_in_hpu_graph(model)`` and
  ``generate(..., lazy_mode=True, hpu_graphs=True)`` (its static shapes), and a
  ``GaudiTrainer`` with ``GaudiConfig(use_fused_adam=True, use_fused_clip_norm=True)`` and
  ``bf16=True``.

Counted by the emulator (``hpu_emulator.counters``): launches as a Gaudi makes them (eager
mode: every op, fused kernel and graph run; lazy mode: every graph run, at ``mark_step`` or a
host read, and every HPU-graph replay), host synchronisations, graph compilations (Gaudi's
own ``metric_global("graph_compilation")``) and the eager recipes the bridge compiles
outside that metric. Per generated token (greedy, the prefill included, a call after one
that compiles) and per ``Trainer`` step (batch 4, 64 tokens, AdamW, ``max_grad_norm=1.0``,
the steps between the first and the last, which logs); each arm runs twice over one recipe
directory, and the second run's compilations are printed (Gaudi's recipe cache on disk).
Tokens are checked against each other and the CPU's, losses against each other. Times are
the emulator's (a CPU), printed for the first call's compilation only.

Run: ``python bench/side_by_side.py`` from the repository (``--optimum-python`` names
another interpreter with optimum-habana; ``--steps``, ``--tokens``).
"""

from __future__ import annotations

import argparse
import importlib.machinery
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent
#: The tiny Llama both arms build (its weights are made once and loaded by both).
CONFIG = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
              pad_token_id=0, bos_token_id=1, eos_token_id=2)
PROMPT = [[1, 5, 9, 14, 27, 33, 41, 52]]
BATCH, LENGTH = 4, 64
#: Relative difference of the two arms' bf16 losses allowed (Transformers' tolerance for
#: bf16 attention against eager attention).
LOSS_TOLERANCE = 2e-2


# -- inside an arm's process ----------------------------------------------------------------


#: Set for the arms whose batches carry an attention mask, as a tokenizer's output does.
WITH_MASK = "BENCH_ATTENTION_MASK"


def rows() -> list[list[int]]:
    return [[3 + (i * 37 + j * 11) % 250 for j in range(LENGTH)] for i in range(BATCH)]


def counters_now() -> dict[str, int]:
    from habana_frameworks.torch.hpu.metrics import metric_global

    from hpu_emulator import counters

    now = counters.snapshot()
    metric = dict(metric_global("graph_compilation").stats())
    return {"launches": now["launches"], "syncs": now["syncs"],
            "compilations": int(metric["TotalNumber"]), "eager_recipes": now["eager_recipes"]}


def minus(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after}


def build(cls: Any, config_cls: Any, weights: str) -> Any:
    import torch

    model = cls(config_cls(**CONFIG))
    model.load_state_dict(torch.load(weights))
    return model


def generation(model: Any, call: Any, tokens: int) -> dict[str, Any]:
    """Two calls: the first compiles (timed), the second is counted."""
    import torch

    prompt = torch.tensor(PROMPT).to("hpu")
    runs = []
    with torch.no_grad():
        for _ in range(2):
            before, started = counters_now(), time.perf_counter()
            out = call(model, prompt, tokens)
            runs.append((minus(counters_now(), before), time.perf_counter() - started,
                         out.cpu()[0].tolist()))
    (_, first_time, _), (counted, later_time, out) = runs
    return {**{k: v / tokens for k, v in counted.items()}, "tokens": out,
            "first_call_s": first_time, "later_call_s": later_time}


class Data:
    def __len__(self) -> int:
        return BATCH

    def __getitem__(self, i: int) -> dict[str, Any]:
        import torch

        ids = torch.tensor(rows()[i])
        # the first token is no target: so both Transformers count the same tokens in the
        # loss's denominator (num_items_in_batch: 5.x leaves the shifted-out one out, 4.55
        # counts it)
        labels = ids.clone()
        labels[0] = -100
        if os.environ.get(WITH_MASK):  # what a tokenizer gives: the mask of a row unpadded
            return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
        return {"input_ids": ids, "labels": labels}


def training(trainer_for: Any, steps: int) -> dict[str, Any]:
    """``steps`` bf16 steps; every step's counters from its start to the next step's start
    (its logging included); the first step (compilations) and the last (it logs) left out
    of the average."""
    from transformers import TrainerCallback

    seen: list[tuple[dict[str, int], float]] = []

    class Steps(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            seen.append((counters_now(), time.perf_counter()))

    common = {"output_dir": tempfile.mkdtemp(prefix="hpu-bench-"), "max_steps": steps,
              "per_device_train_batch_size": BATCH, "learning_rate": 1e-3,
              "max_grad_norm": 1.0, "bf16": True, "logging_steps": steps, "report_to": [],
              "save_strategy": "no", "seed": 0, "disable_tqdm": True}
    before = counters_now()
    trainer = trainer_for(common)
    trainer.add_callback(Steps())
    out = trainer.train()
    seen.append((counters_now(), time.perf_counter()))
    per = [minus(b[0], a[0]) for a, b in itertools.pairwise(seen)]
    times = [b[1] - a[1] for a, b in itertools.pairwise(seen)]
    middle = per[1:-1] or per
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {**{k: sum(p[k] for p in middle) / len(middle) for k in middle[0]},
            "first_step_s": times[0], "later_step_s": sum(times[1:-1]) / max(1, len(times) - 2),
            "losses": losses, "train_loss": out.training_loss,
            "run_compilations": minus(counters_now(), before)["compilations"]}


def plugin_arm(weights: str, steps: int, tokens: int) -> dict[str, Any]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    def greedy(model: Any, prompt: Any, n: int) -> Any:
        return model.generate(prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False)

    model = build(LlamaForCausalLM, LlamaConfig, weights)
    with torch.no_grad():  # the reference: Transformers on the CPU
        cpu = greedy(model.eval(), torch.tensor(PROMPT), tokens)[0].tolist()
    result = {"generate": generation(model.to("hpu").eval(), greedy, tokens), "cpu_tokens": cpu}

    def trainer_for(common: dict[str, Any]) -> Any:
        return Trainer(model=build(LlamaForCausalLM, LlamaConfig, weights), train_dataset=Data(),
                       args=TrainingArguments(**common))

    result["train"] = training(trainer_for, steps)
    return result


class _Absent(types.ModuleType):
    """Any attribute is a placeholder class: module-level ``from x import y`` succeeds."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {})


def adapt() -> None:
    """``adapt_transformers_to_gaudi()``, as ``tests_engines/optimum_job.py`` runs it: its
    GLM-4V tokenizer imports torchvision, which has no build for this torch (nothing here
    uses it), so that one import is a stand-in."""
    for name in ["torchvision", "torchvision.transforms"]:
        sys.modules[name] = _Absent(name)
        sys.modules[name].__spec__ = importlib.machinery.ModuleSpec(name, None)
    from optimum.habana.transformers.modeling_utils import adapt_transformers_to_gaudi

    adapt_transformers_to_gaudi()


def optimum_arm(weights: str, steps: int, tokens: int) -> dict[str, Any]:
    adapt()  # Llama is optimum-habana's Gaudi Llama from here
    import habana_frameworks.torch.hpu as hthpu
    from optimum.habana import GaudiConfig, GaudiTrainer, GaudiTrainingArguments
    from transformers import AutoModelForCausalLM, LlamaConfig

    def model_of() -> Any:
        return build(lambda config: AutoModelForCausalLM.from_config(config), LlamaConfig,
                     weights)

    def greedy(model: Any, prompt: Any, n: int) -> Any:
        return model.generate(prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                              lazy_mode=True, hpu_graphs=True)

    model = hthpu.wrap_in_hpu_graph(model_of().eval().to("hpu"))
    result = {"generate": generation(model, greedy, tokens), "model": type(model).__name__}

    def trainer_for(common: dict[str, Any]) -> Any:
        args = GaudiTrainingArguments(use_habana=True, use_lazy_mode=True, **common)
        return GaudiTrainer(model=model_of(), train_dataset=Data(), args=args,
                            gaudi_config=GaudiConfig(use_fused_adam=True,
                                                     use_fused_clip_norm=True))

    result["train"] = training(trainer_for, steps)
    return result


def make_weights(path: str) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    torch.save(LlamaForCausalLM(LlamaConfig(**CONFIG)).state_dict(), path)


# -- the parent: both arms, twice each ------------------------------------------------------


def run_arm(python: str, arm: str, weights: str, recipes: str, steps: int,
            tokens: int, extra: dict[str, str] | None = None) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HPU_PLUGIN_", "PT_HPU_", "PT_RECIPE"))}
    env.update({"HPU_PLUGIN_EMULATE": "1", "TRANSFORMERS_VERBOSITY": "error",
                "PT_HPU_RECIPE_CACHE_CONFIG": f"{recipes},false",
                # as in an activated venv: optimum-habana reads the bridge's version from pip
                "PATH": os.path.dirname(python) + os.pathsep + os.environ.get("PATH", "")})
    if arm == "optimum":
        # its default mode; the plugin's own fast paths stay out of optimum-habana's way
        env.update({"PT_HPU_LAZY_MODE": "1", "HPU_PLUGIN_FAST": "0"})
    env.update(extra or {})
    done = subprocess.run([python, str(HERE), "--arm", arm, "--weights", weights,
                           "--steps", str(steps), "--tokens", str(tokens)], env=env,
                          capture_output=True, text=True, timeout=3600, check=False)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT")), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(f"the {arm} arm failed ({python}):\n{done.stderr[-4000:]}")
    return json.loads(line[len("RESULT"):])


def close(a: float, b: float) -> bool:
    return abs(a - b) <= LOSS_TOLERANCE * max(abs(a), abs(b))


def report(results: dict[str, list[dict[str, Any]]], steps: int, tokens: int) -> None:
    plugin, optimum = results["plugin"][0], results["optimum"][0]
    print(f"tiny Llama (2 layers, hidden 64); generate: greedy, prompt {len(PROMPT[0])}, "
          f"{tokens} new tokens (per token, prefill included, second call); Trainer: bf16, "
          f"batch {BATCH} x {LENGTH} tokens, AdamW, max_grad_norm=1.0, {steps} steps "
          f"(per step, steps 2..{steps - 1})")
    print(f"  {'':<28}{'hpu-plugin':>12}{'optimum-habana':>16}{'ratio':>8}")
    for part, label in (("generate", "per token"), ("train", "per bf16 step")):
        for key in ("launches", "syncs", "compilations", "eager_recipes"):
            a, b = plugin[part][key], optimum[part][key]
            ratio = f"{a / b:.2f}" if b else ("-" if not a else "inf")
            print(f"  {key + ' ' + label:<28}{a:>12.2f}{b:>16.2f}{ratio:>8}")
    for part, key, label in (("generate", "first_call_s", "first generate() call, s"),
                             ("generate", "later_call_s", "later generate() call, s"),
                             ("train", "first_step_s", "first Trainer step, s"),
                             ("train", "later_step_s", "later Trainer step, s")):
        print(f"  {label:<28}{plugin[part][key]:>12.2f}{optimum[part][key]:>16.2f}")
    second = {arm: results[arm][1] for arm in ("plugin", "optimum")}
    print("  graph compilations, second run of each job over the same recipe directory:")
    for arm, name in (("plugin", "hpu-plugin"), ("optimum", "optimum-habana")):
        print(f"    {name:<16} generate (second call) {second[arm]['generate']['compilations']:.0f}"
              f", Trainer run {second[arm]['train']['run_compilations']}"
              f" (first run: {results[arm][0]['train']['run_compilations']})")
    same = plugin["generate"]["tokens"] == optimum["generate"]["tokens"] == plugin["cpu_tokens"]
    print(f"  tokens: {'the same in both and on the CPU' if same else 'DIFFER'}"
          f" {plugin['generate']['tokens'][len(PROMPT[0]):]}")
    model = results["plugin-model"][0]
    print("  hpu-plugin with HPU_PLUGIN_TRAIN_GRAPHS_REGION=model (the whole model one graph):")
    for part, label in (("generate", "per token"), ("train", "per bf16 step")):
        a, b = model[part]["launches"], optimum[part]["launches"]
        print(f"  {'launches ' + label:<28}{a:>12.2f}{b:>16.2f}{a / b if b else 0:>8.2f}")
    print(f"  {'first Trainer step, s':<28}{model['train']['first_step_s']:>12.2f}"
          f"{optimum['train']['first_step_s']:>16.2f}")
    masked = {arm: results[f"{arm}-mask"][0]["train"] for arm in ("plugin", "optimum")}
    print("  batches with an attention mask (as a tokenizer gives them), per bf16 step:")
    for key in ("launches", "syncs"):
        a, b = masked["plugin"][key], masked["optimum"][key]
        ratio = f"{a / b:.2f}" if b else ("-" if not a else "inf")
        print(f"  {key:<28}{a:>12.2f}{b:>16.2f}{ratio:>8}")
    pl, ol = plugin["train"]["train_loss"], optimum["train"]["train_loss"]
    print(f"  mean training loss: hpu-plugin {pl:.5f}, optimum-habana {ol:.5f} (relative "
          f"difference {abs(pl - ol) / abs(ol):.1e}): "
          f"{'within' if close(pl, ol) else 'OUTSIDE'} {LOSS_TOLERANCE:.0%}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arm", choices=("plugin", "optimum"))
    parser.add_argument("--weights")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--optimum-python", default=str(ROOT / ".venv-optimum/bin/python"))
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    if args.arm:
        run = plugin_arm if args.arm == "plugin" else optimum_arm
        print("RESULT" + json.dumps(run(args.weights, args.steps, args.tokens)), flush=True)
        return 0
    if not Path(args.optimum_python).exists():
        raise SystemExit(f"no optimum-habana interpreter at {args.optimum_python}: create it "
                         "with `bash .ci/full optimum` (setup_venv .venv-optimum "
                         "requirements/optimum-habana.txt), or pass --optimum-python")
    with tempfile.TemporaryDirectory(prefix="hpu-bench-side-") as folder:
        weights = os.path.join(folder, "llama.pt")
        make_weights(weights)
        results: dict[str, list[dict[str, Any]]] = {}
        for arm, python in (("plugin", sys.executable), ("optimum", args.optimum_python)):
            recipes = os.path.join(folder, f"recipes-{arm}")
            results[arm] = [run_arm(python, arm, weights, recipes, args.steps, args.tokens)
                            for _ in range(2)]
        results["plugin-model"] = [run_arm(
            sys.executable, "plugin", weights, os.path.join(folder, "recipes-model"),
            args.steps, args.tokens, {"HPU_PLUGIN_TRAIN_GRAPHS_REGION": "model"})]
        for arm, python in (("plugin", sys.executable), ("optimum", args.optimum_python)):
            results[f"{arm}-mask"] = [run_arm(
                python, arm, weights, os.path.join(folder, f"recipes-{arm}-mask"),
                args.steps, args.tokens, {WITH_MASK: "1"})]
    report(results, args.steps, args.tokens)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
