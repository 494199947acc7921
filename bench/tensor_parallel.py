"""Tensor parallelism across emulated Gaudi cards: memory per rank and collectives per token.

A model split over N cards should hold about 1/N of its weights on each, and pay for it in
collectives: Transformers' Llama plan reduces after every attention and MLP block. For
tensor-parallel sizes 1, 2, 4 and 8 this runs the same ``from_pretrained(tp_plan="auto")``
and greedy ``generate()`` under ``torchrun`` on the emulator and prints, per size, the device
memory a rank holds after loading and at its peak while generating (the emulator's
``torch.hpu.memory_allocated`` and ``max_memory_allocated``, the bridge's ``InUse`` and
``MaxInUse``) as ratios of one card's, and the collectives a rank issues per generated token
(counted below torch's dispatcher: c10d's own, which ``torch.distributed.all_reduce`` in the
row-wise layers calls, and the functional ones of DTensor).

    python bench/tensor_parallel.py            # sizes 1, 2, 4, 8
    python bench/tensor_parallel.py 1 2        # some of them
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SIZES = (1, 2, 4, 8)
NEW_TOKENS = 16

MAKE = """
import sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
config = LlamaConfig(vocab_size=1024, hidden_size=512, intermediate_size=1536,
                     num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=8)
LlamaForCausalLM(config).save_pretrained(sys.argv[1])
"""

RANK = """
import json, os, sys, torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import AutoModelForCausalLM

class Collectives(TorchDispatchMode):
    count = 0
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if func.namespace in ("_c10d_functional", "c10d") and not name.startswith(("wait", "_")):
            Collectives.count += 1
        return func(*args, **(kwargs or {}))

path, new = sys.argv[1], int(sys.argv[2])
tp = "WORLD_SIZE" in os.environ
model = (AutoModelForCausalLM.from_pretrained(path, tp_plan="auto") if tp
         else AutoModelForCausalLM.from_pretrained(path).to("hpu"))
memory = torch.hpu.memory_allocated()
torch.hpu.reset_peak_memory_stats()
ids = torch.tensor([[1, 5, 9, 3, 7, 2, 8, 4]], device=model.device)
with Collectives():
    tokens = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False)
print("RESULT " + json.dumps({"rank": os.environ.get("RANK", "0"), "memory": memory,
      "peak": torch.hpu.max_memory_allocated(), "collectives": Collectives.count,
      "tokens": tokens[0].tolist()}), flush=True)
"""


def _env() -> dict[str, str]:
    env = dict(os.environ, HPU_PLUGIN_EMULATE="1", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
               PYTHONUNBUFFERED="1")
    env.pop("WORLD_SIZE", None)
    return env


def _run(size: int, model: Path, script: Path) -> list[dict]:
    env = _env()
    env["HPU_PLUGIN_EMULATE_DEVICES"] = str(max(size, 1))
    argv = ([sys.executable, str(script), str(model), str(NEW_TOKENS)] if size == 1 else
            [sys.executable, "-m", "torch.distributed.run", "--standalone",
             "--nproc_per_node", str(size), str(script), str(model), str(NEW_TOKENS)])
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    decoder = json.JSONDecoder()
    found = [decoder.raw_decode(done.stdout, i + len("RESULT "))[0]
             for i in range(len(done.stdout)) if done.stdout.startswith("RESULT ", i)]
    if done.returncode != 0 or len(found) != size:
        raise SystemExit(f"tp={size} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return found


def main() -> None:
    sizes = tuple(int(a) for a in sys.argv[1:]) or SIZES
    if 1 not in sizes:
        sizes = (1, *sizes)  # the reference every ratio is of
    with tempfile.TemporaryDirectory() as folder:
        model, script = Path(folder) / "model", Path(folder) / "rank.py"
        script.write_text(RANK)
        subprocess.run([sys.executable, "-c", MAKE, str(model)], env=dict(
            os.environ, HF_HUB_OFFLINE="1"), check=True, capture_output=True)
        rows = {size: _run(size, model, script) for size in sizes}
    one = rows[1][0]
    print(f"one card: {one['memory'] / 2**20:.2f} MiB after loading, "
          f"{one['peak'] / 2**20:.2f} MiB at the peak of generate()")
    print(f"{'tp':>3} {'loaded / one card':>18} {'peak / one card':>16} {'1/tp':>6} "
          f"{'collectives per token per rank':>31} {'same tokens':>12}")
    for size, ranks in rows.items():
        memory = max(r["memory"] for r in ranks) / one["memory"]
        peak = max(r["peak"] for r in ranks) / one["peak"]
        per_token = max(r["collectives"] for r in ranks) / NEW_TOKENS
        same = all(r["tokens"] == one["tokens"] for r in ranks)
        print(f"{size:>3} {memory:>18.3f} {peak:>16.3f} {1 / size:>6.3f} {per_token:>31.1f} "
              f"{same!s:>12}")


if __name__ == "__main__":
    main()
