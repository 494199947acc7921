"""Speed of the Gaudi emulator against plain CPU, measured side by side in one process.

    python bench/emulator_speed.py [--steps N]

Prints, with one intra-op thread (timings with two threads are too noisy on small machines):
- a tiny Llama training step (forward, backward, AdamW) on ``hpu`` / the same step on CPU;
- the fallback's overhead per op, in microseconds (``a + b`` on 4 elements);
- greedy ``generate`` tokens per second on ``hpu`` against CPU.
Runs are interleaved (CPU, HPU, CPU, HPU...) and medians compared, so drift hits both sides.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("HPU_PLUGIN_EMULATE", "1")

import torch  # after the variable: the emulator loads inside this import


def interleaved(fns: dict[str, Callable[[], None]], repeats: int) -> dict[str, float]:
    """Median time of each function, plus ``ratio``: the median of hpu/cpu over adjacent runs
    (robust to load from other processes, which drifts slower than one pair of runs)."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    result = {name: statistics.median(values) for name, values in samples.items()}
    pairs = zip(samples["hpu"], samples["cpu"], strict=True)
    result["ratio"] = statistics.median([h / c for h, c in pairs])
    return result


def tiny_llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=128, vocab_size=1000)
    return LlamaForCausalLM(config)


def training_step(steps: int) -> tuple[float, float, float, bool]:
    cpu_model = tiny_llama()
    hpu_model = copy.deepcopy(cpu_model).to("hpu")
    ids = torch.randint(0, 1000, (4, 64))
    setups = {
        "cpu": (cpu_model, torch.optim.AdamW(cpu_model.parameters(), lr=1e-4), ids),
        "hpu": (hpu_model, torch.optim.AdamW(hpu_model.parameters(), lr=1e-4), ids.to("hpu")),
    }
    losses: dict[str, list[float]] = {"cpu": [], "hpu": []}

    def step(name: str) -> Callable[[], None]:
        model, opt, batch = setups[name]

        def run() -> None:
            loss = model(batch, labels=batch).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses[name].append(loss.item())

        return run

    for name in setups:  # warm-up
        step(name)()
    times = interleaved({name: step(name) for name in setups}, steps)
    same = losses["cpu"] == losses["hpu"]
    return times["cpu"], times["hpu"], times["ratio"], same


def per_op_overhead(repeats: int = 20, inner: int = 2000) -> tuple[float, float, float]:
    a, b = torch.randn(4), torch.randn(4)
    ha, hb = a.to("hpu"), b.to("hpu")

    def loop(x: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
        def run() -> None:
            for _ in range(inner):
                x + y

        return run

    times = interleaved({"cpu": loop(a, b), "hpu": loop(ha, hb)}, repeats)
    return times["cpu"] / inner * 1e6, times["hpu"] / inner * 1e6, times["ratio"]


def generate_speed(repeats: int = 9, new_tokens: int = 32) -> tuple[float, float, float, bool]:
    cpu_model = tiny_llama().eval()
    hpu_model = copy.deepcopy(cpu_model).to("hpu")
    ids = torch.randint(0, 1000, (1, 16))
    outputs: dict[str, torch.Tensor] = {}

    def gen(name: str, model: torch.nn.Module, batch: torch.Tensor) -> Callable[[], None]:
        def run() -> None:
            with torch.no_grad():
                outputs[name] = model.generate(
                    batch, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                    do_sample=False,
                ).cpu()

        return run

    fns = {"cpu": gen("cpu", cpu_model, ids), "hpu": gen("hpu", hpu_model, ids.to("hpu"))}
    for fn in fns.values():
        fn()
    times = interleaved(fns, repeats)
    same = torch.equal(outputs["cpu"], outputs["hpu"])
    return new_tokens / times["cpu"], new_tokens / times["hpu"], 1 / times["ratio"], same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="timed training steps per side")
    args = parser.parse_args()
    if not (hasattr(torch, "hpu") and torch.hpu.is_available()):
        raise SystemExit("the emulator did not start; see the hpu_plugin message above")
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, emulated {torch.hpu.get_device_name()}, 1 thread")

    cpu_s, hpu_s, ratio, same = training_step(args.steps)
    calls_before = torch.hpu.fallback_calls()
    training_step(2)
    print(
        f"training step (tiny Llama, batch 4x64, fwd+bwd+AdamW): cpu {cpu_s * 1e3:.2f} ms, "
        f"hpu {hpu_s * 1e3:.2f} ms, ratio hpu/cpu {ratio:.3f}, "
        f"losses identical: {same}"
    )
    print(f"  fallback calls per hpu step: "
          f"{(torch.hpu.fallback_calls() - calls_before) // 3}")
    cpu_us, hpu_us, op_ratio = per_op_overhead()
    print(f"one op (a + b, 4 elements): cpu {cpu_us:.2f} us, hpu {hpu_us:.2f} us, "
          f"fallback overhead {hpu_us - cpu_us:.2f} us/op, ratio {op_ratio:.2f}")
    cpu_tps, hpu_tps, tps_ratio, equal = generate_speed()
    print(f"greedy generate (32 new tokens): cpu {cpu_tps:.1f} tok/s, hpu {hpu_tps:.1f} tok/s, "
          f"ratio hpu/cpu {tps_ratio:.3f}, tokens identical: {equal}")


if __name__ == "__main__":
    main()
