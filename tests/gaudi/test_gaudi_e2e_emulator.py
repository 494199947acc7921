"""The Gaudi rules end to end on the emulator: a user's unchanged script under ``torchrun``
and ``accelerate launch`` gets the documented error before training starts, or runs.

Needs the emulator (``hpu_emulator``) and the host adapters (``hpu_plugin.hosts``);
the ``emulator`` fixture fails first, with the reason, when the emulator cannot start.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from processes import run, scrubbed

pytestmark = pytest.mark.e2e
TIMEOUT = 600

TRAIN = """
import os
import torch
import torch.distributed as dist
from transformers import Trainer, TrainingArguments

class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 8
    def __getitem__(self, i):
        return {"x": torch.randn(8), "labels": torch.randn(2)}

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 2)
    def forward(self, x, labels=None):
        out = self.linear(x)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}

args = TrainingArguments(output_dir=os.environ["OUT"], max_steps=2, per_device_train_batch_size=2,
                         report_to=[], save_strategy="no")
print("TRAINING-STARTS", flush=True)
Trainer(model=Net(), args=args, train_dataset=Data()).train()
print(f"rank={dist.get_rank()} world={dist.get_world_size()} backend={dist.get_backend()} "
      f"device={args.device.type}", flush=True)
"""

COMPILE = """
import torch
model = torch.nn.Linear(4, 2).to("hpu")
print("COMPILING", flush=True)
out = torch.compile(model)(torch.randn(3, 4, device="hpu"))
print("compiled", tuple(out.shape), out.device.type, flush=True)
"""


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = scrubbed(
        HPU_PLUGIN_EMULATE="1",
        HF_HOME=str(tmp_path / "hf"),
        HF_HUB_OFFLINE="1",
        OMP_NUM_THREADS="1",
        OUT=str(tmp_path / "out"),
        PYTHONUNBUFFERED="1",
        PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
    )
    env.update(extra)
    return env


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run(argv, env, TIMEOUT, cwd=env["HF_HOME"].rsplit("/", 1)[0])


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("probe")
    probe = _run(
        [sys.executable, "-c", "import torch; print('ready', torch.hpu.is_available())"], _env(tmp)
    )
    assert "ready True" in probe.stdout, probe.stderr[-3000:]


def _script(tmp_path: Path, source: str) -> str:
    path = tmp_path / "user_script.py"
    path.write_text(source)
    return str(path)


def _torchrun(tmp_path: Path, processes: int, modules: str) -> subprocess.CompletedProcess[str]:
    env = _env(tmp_path, HABANA_VISIBLE_MODULES=modules)
    return _run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc-per-node={processes}",
            _script(tmp_path, TRAIN),
        ],
        env,
    )


def test_three_processes_get_the_documented_error_before_training(tmp_path, emulator):
    done = _torchrun(tmp_path, 3, "0,1,2")
    assert done.returncode != 0
    assert "TRAINING-STARTS" not in done.stdout  # refused at TrainingArguments
    assert "HABANA_VISIBLE_MODULES='0,1,2': a group of 3 devices" in done.stderr
    assert "groups of 2 devices with module ids 0,1 | 2,3 | 4,5 | 6,7" in done.stderr


def test_unsupported_pair_under_accelerate_launch_lists_supported_pairs(tmp_path, emulator):
    env = _env(tmp_path)
    done = _run(
        [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--num_processes",
            "2",
            "--gpu_ids",
            "0,2",
            _script(tmp_path, TRAIN),
        ],
        env,
    )
    assert done.returncode != 0
    assert "TRAINING-STARTS" not in done.stdout
    assert (
        "HABANA_VISIBLE_MODULES='0,2': module ids 0,2 are not a supported group of 2" in done.stderr
    )
    assert "0,1 | 2,3 | 4,5 | 6,7" in done.stderr


def test_two_processes_on_a_supported_pair_train(tmp_path, emulator):
    done = _torchrun(tmp_path, 2, "2,3")
    assert done.returncode == 0, done.stderr[-4000:]
    ranks = sorted(re.findall(r"rank=(\d) world=2 backend=hccl device=hpu", done.stdout))
    assert ranks == ["0", "1"], done.stdout


def test_compile_in_lazy_mode_is_a_clear_error(tmp_path, emulator):
    script = _script(tmp_path, COMPILE)
    lazy = _run([sys.executable, script], _env(tmp_path, PT_HPU_LAZY_MODE="1"))
    assert lazy.returncode != 0 and "COMPILING" in lazy.stdout
    assert "PT_HPU_LAZY_MODE='1': torch.compile does not work in Gaudi lazy mode" in lazy.stderr
    assert "set PT_HPU_LAZY_MODE=0" in lazy.stderr
    eager = _run([sys.executable, script], _env(tmp_path))  # unset: the plugin sets 0
    assert eager.returncode == 0, eager.stderr[-3000:]
    assert "compiled (3, 2) hpu" in eager.stdout
