"""The one way tests start a user's program: a scrubbed environment and a subprocess.

A test that runs ``hpu-plugin`` or a script must control everything the plugin reads: the
developer's shell may export ``HPU_PLUGIN_EMULATE`` or ``HABANA_VISIBLE_MODULES``, and a real
``hl-smi`` on ``PATH`` would answer for a machine the test did not describe. ``tests/`` is on
``sys.path`` (the root conftest is not in a package), so any test imports this module.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

#: Prefixes and names of the settings the plugin, Gaudi and the launchers read.
PREFIXES = ("HPU_PLUGIN_", "HABANA_", "PT_HPU_", "PT_ENABLE_", "ACCELERATE_", "HPU_TEST_")
NAMES = frozenset({"HLS_MODULE_ID", "ID", "LOCAL_RANK", "RANK", "WORLD_SIZE",
                   "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                   "TORCH_DEVICE_BACKEND_AUTOLOAD"})
#: Where the emulator's compiled runtime is cached: sharing it saves a build per test.
KEEP = frozenset({"HPU_PLUGIN_CACHE_DIR"})


def scrubbed(*also: str, **extra: str) -> dict[str, str]:
    """This process's environment without any Gaudi, plugin or launcher setting (nor
    variables starting with ``also``: a test plugin's own switches), plus ``extra``."""
    prefixes = PREFIXES + also
    env = {
        name: value
        for name, value in os.environ.items()
        if name in KEEP or not (name in NAMES or name.startswith(prefixes))
    }
    # an empty recipe cache of its own, as a job's first run on a machine has: the plugin's
    # default keeps recipes between runs, so tests would see each other's compilations
    env["PT_HPU_RECIPE_CACHE_CONFIG"] = f"{fresh_directory('hpu-plugin-test-recipes-')},false"
    env.update(extra)
    return env


def fresh_directory(prefix: str) -> str:
    """A new temporary directory, removed when the test process ends."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, True)
    return path


def no_hlsmi_path(path_dirs: Iterable[Path | str] = ()) -> str:
    """A ``PATH`` of ``path_dirs``, the interpreter's directory and the system's: no real
    ``hl-smi`` can leak in."""
    dirs = [*map(str, path_dirs), str(Path(sys.executable).parent), "/usr/bin", "/bin"]
    return os.pathsep.join(dirs)


def emulated(**extra: str) -> dict[str, str]:
    """A scrubbed environment that asks for the emulator (one thread: 2-core CI)."""
    return scrubbed(**{"HPU_PLUGIN_EMULATE": "1", "OMP_NUM_THREADS": "1", **extra})


def run(
    argv: Sequence[str], env: dict[str, str], timeout: float = 600,
    cwd: str | os.PathLike[str] | None = None, check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to completion, capturing text output. ``check``: a non-zero exit fails
    the test with the ends of both outputs (what a failing user program printed)."""
    done = subprocess.run(
        list(argv), env=env, capture_output=True, text=True, timeout=timeout, check=False,
        cwd=cwd,
    )
    if check and done.returncode != 0:
        raise AssertionError(
            f"exit {done.returncode}: {' '.join(map(str, argv))[:200]}\n"
            f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-6000:]}"
        )
    return done


def run_cli(
    *args: str, env: dict[str, str], timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``hpu-plugin <args>`` as a user runs it."""
    return run([sys.executable, "-m", "hpu_plugin", *args], env, timeout)


def run_python(
    code: str, env: dict[str, str], timeout: float = 600,
    cwd: str | os.PathLike[str] | None = None, args: Sequence[str] = (), check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``python -c <code> <args>`` (``code`` is dedented: tests write it indented)."""
    return run([sys.executable, "-c", textwrap.dedent(code), *args], env, timeout, cwd, check)


def result_of(output: str) -> Any:
    """The JSON a test script printed after ``RESULT`` on a line of its own output (scripts
    print other lines too: warnings, the plugin's reports)."""
    line = next(line for line in output.splitlines() if line.startswith("RESULT"))
    return json.loads(line[len("RESULT"):])


#: What the scripts that train a tiny model with an unchanged ``Trainer`` share (prepended to
#: their text): 40 rows of token ids of lengths 5..24, a collator that right-pads them (labels
#: -100 at the pads) and a callback that keeps the logged losses.
TRAINING_ROWS = r"""
import random
import torch
from torch.utils.data import Dataset
from transformers import TrainerCallback

class Rows(Dataset):
    def __init__(self):
        rng = random.Random(0)
        self.n = [rng.randint(5, 24) for _ in range(40)]
    def __len__(self):
        return len(self.n)
    def __getitem__(self, i):
        ids = [3 + (i * 7 + j * 5) % 90 for j in range(self.n[i])]
        return {"input_ids": ids, "labels": ids}

def collate(features):
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

class Losses(TrainerCallback):
    def __init__(self):
        self.losses = []
    def on_log(self, args, state, control, logs=None, **kw):
        if logs and "loss" in logs:
            self.losses.append(logs["loss"])
"""


#: A tiny Llama taught a next-token rule (a fixed permutation of its vocabulary) on the CPU,
#: so its logits are decisive and greedy tokens compare numerics, not ties: ``V``, ``cfg``,
#: the seeded generator ``gen`` and ``rows(n, length)`` (batches that follow the rule), and
#: ``taught_llama(steps)``. Scripts that draw from ``gen`` afterwards get the same numbers
#: in every run.
TAUGHT_LLAMA = r"""
import torch
from transformers import LlamaConfig, LlamaForCausalLM

V = 128
cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=V,
                  max_position_embeddings=64, bos_token_id=1, eos_token_id=None, pad_token_id=0)
gen = torch.Generator().manual_seed(0)
perm = torch.randperm(V, generator=gen)

def rows(n, length):
    tokens = [torch.randint(0, V, (n,), generator=gen)]
    for _ in range(length - 1):
        tokens.append(perm[tokens[-1]])
    return torch.stack(tokens, 1)

def taught_llama(steps):
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(steps):
        batch = rows(32, 24)
        loss = model(batch, labels=batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    return model, loss
"""
