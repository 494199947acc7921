"""One process per Gaudi device: ``accelerate launch`` and ``torchrun`` on 2 emulated devices."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from .conftest import emulated_env, run

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("emulator")]

ACCELERATE_TRAIN = """
import torch
from accelerate import Accelerator

accelerator = Accelerator()
state = accelerator.state
torch.manual_seed(0)
model = torch.nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
torch.manual_seed(100 + accelerator.process_index)  # different data on each rank
for _ in range(3):
    x = torch.randn(4, 8, device=accelerator.device)
    loss = model(x).pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
rows = [torch.zeros_like(flat) for _ in range(accelerator.num_processes)]
torch.distributed.all_gather(rows, flat)
equal = all(torch.allclose(rows[0].cpu(), row.cpu()) for row in rows)
print(f"rank={accelerator.process_index} n={accelerator.num_processes} "
      f"type={state.distributed_type} backend={state.backend} "
      f"device={accelerator.device.type} views={model.gradient_as_bucket_view} "
      f"equal={equal}", flush=True)
"""


def _ranks(stdout: str) -> list[dict[str, str]]:
    """One dict per rank report. The ranks share the pipe, so a report can start right
    after another rank's text on the same line ("current=0rank=0 ..."): match the whole
    report wherever it starts."""
    reports = re.findall(r"rank=\d+ .*?equal=(?:True|False)", stdout)
    return [dict(re.findall(r"(\w+)=(\S+)", report)) for report in reports]


def _with_scripts_on_path(env: dict[str, str]) -> dict[str, str]:
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


#: Started in every process of the job: the launcher (no LOCAL_RANK) says at exit whether it
#: took a Gaudi module, which on Gaudi would then be held from the rank that needs it.
LAUNCHER_PROBE = """
import atexit, os, sys

def _said():
    runtime = sys.modules.get("hpu_emulator.runtime")
    if "LOCAL_RANK" not in os.environ and runtime is not None:
        print(f"launcher acquired={runtime.device_acquired()}", flush=True)

atexit.register(_said)
"""


def test_accelerate_launch_starts_one_process_per_device(tmp_path):
    """Without ``--num_processes``: one process per device, counted without taking one."""
    script = tmp_path / "train.py"
    script.write_text(ACCELERATE_TRAIN)
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(LAUNCHER_PROBE)
    env = _with_scripts_on_path(emulated_env(tmp_path, devices=2, PYTHONPATH=str(probe)))
    accelerate = os.path.join(os.path.dirname(sys.executable), "accelerate")
    result = run("", env, argv=[accelerate, "launch", str(script)], cwd=tmp_path)
    assert "launcher acquired=False" in result.stdout, result.stdout + result.stderr
    ranks = _ranks(result.stdout)
    assert sorted(r["rank"] for r in ranks) == ["0", "1"], result.stdout + result.stderr
    for rank in ranks:
        assert rank["n"] == "2"
        assert rank["type"].endswith("MULTI_HPU")
        assert rank["backend"] == "hccl"
        assert rank["device"] == "hpu"
        assert rank["equal"] == "True"  # DDP kept the parameters equal across ranks
        # the user's own loop may keep a gradient across steps: no bucket views for it
        assert rank["views"] == "False", rank


def _torchrun_two(script: Path, env: dict[str, str]):
    """Run ``script`` under torchrun with two processes; the result and each rank's line
    (asserting both ranks reported)."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc_per_node", "2", str(script)]
    result = run("", env, argv=argv, cwd=script.parent)
    ranks = _ranks(result.stdout)
    assert sorted(r["rank"] for r in ranks) == ["0", "1"], result.stdout + result.stderr
    return result, ranks


def test_a_launcher_naming_hpu_without_an_index_trains(tmp_path):
    """Ray Train sets ACCELERATE_TORCH_DEVICE=hpu (no index) in each worker; Accelerate's
    DDP branch for HPU then passed device_ids=[None], which DDP refuses. Each process must
    train on its current Gaudi, as when Accelerate picks the device itself."""
    script = tmp_path / "train.py"
    script.write_text(ACCELERATE_TRAIN + "print(f'index={accelerator.device.index} "
                      "current={torch.hpu.current_device()}')\n")
    result, ranks = _torchrun_two(script, emulated_env(tmp_path, devices=2,
                                                     ACCELERATE_TORCH_DEVICE="hpu"))
    for rank in ranks:
        assert rank["type"].endswith("MULTI_HPU")
        assert rank["backend"] == "hccl"
        assert rank["equal"] == "True"
    # The ranks share the pipe, unbuffered: one rank's line can run into the other's.
    indices = re.findall(r"index=(\d+) current=(\d+)", result.stdout)
    assert len(indices) == 2 and all(index == current for index, current in indices), indices


TORCHRUN_TRAIN = """
import torch
import torch.distributed as dist
from transformers import Trainer, TrainingArguments

class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 16
    def __getitem__(self, i):
        return {"x": torch.randn(8), "labels": torch.randn(2)}

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 2)
    def forward(self, x, labels=None):
        out = self.linear(x)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}

training_args = TrainingArguments(
    output_dir=OUT, bf16=True, ddp_backend="hccl", max_steps=3,
    per_device_train_batch_size=4, report_to=[], save_strategy="no",
)
torch.manual_seed(0)
model = Net()
Trainer(model=model, args=training_args, train_dataset=Data()).train()
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).to(training_args.device)
rows = [torch.zeros_like(flat) for _ in range(dist.get_world_size())]
dist.all_gather(rows, flat)
equal = all(torch.allclose(rows[0].cpu(), row.cpu()) for row in rows)
print(f"rank={dist.get_rank()} n={dist.get_world_size()} backend={dist.get_backend()} "
      f"device={training_args.device.type} mode={training_args.parallel_mode} equal={equal}",
      flush=True)
"""


def test_ddp_backend_hccl_under_torchrun(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(f"OUT = {str(tmp_path / 'out')!r}\n" + TORCHRUN_TRAIN)
    _, ranks = _torchrun_two(script, emulated_env(tmp_path, devices=2))
    for rank in ranks:
        assert rank["backend"] == "hccl"
        assert rank["device"] == "hpu"
        assert rank["mode"].endswith("DISTRIBUTED")
        assert rank["equal"] == "True"


#: The multi-GPU recipe of QLoRA and TRL examples: each rank loads the model on device
#: ``process_index``; then the fix the refusal names.
PER_RANK_DEVICE_MAP = """
import sys
import torch
from accelerate import PartialState
from transformers import LlamaConfig, LlamaForCausalLM

state = PartialState()
path = sys.argv[1]
if state.is_main_process:
    LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                 num_attention_heads=2, vocab_size=64)).save_pretrained(path)
state.wait_for_everyone()
try:
    LlamaForCausalLM.from_pretrained(path, device_map={"": state.process_index})
    print(f"rank={state.process_index} loaded", flush=True)
except ValueError as exc:
    print(f"rank={state.process_index} refused: {exc}", flush=True)
model = LlamaForCausalLM.from_pretrained(path, device_map={"": state.device})
print(f"rank={state.process_index} fixed device={model.device}", flush=True)
"""


def test_a_device_map_of_another_gaudi_is_refused_with_the_fix(tmp_path):
    """Rank 1 asking for device 1 is refused before loading (the Gaudi software would
    refuse the first tensor put there), naming the fix, which then works on every rank."""
    script = tmp_path / "load.py"
    script.write_text(PER_RANK_DEVICE_MAP)
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc_per_node", "2", str(script), str(tmp_path / "model")]
    result = run("", emulated_env(tmp_path, devices=2), argv=argv, cwd=tmp_path)
    out = result.stdout
    assert "rank=0 loaded" in out, out + result.stderr
    assert "rank=1 refused: device_map={'': 1} names the device 1" in out
    assert "Fix: give every rank device_map='hpu'" in out
    assert "rank=0 fixed device=hpu:0" in out and "rank=1 fixed device=hpu:0" in out


CPU_JOB = """
import sys, torch
from accelerate import Accelerator
from accelerate.utils import set_seed

accelerator = Accelerator(cpu=True)
set_seed(0)  # asks Accelerate's is_hpu_available, which imports the Gaudi software
total = accelerator.reduce(torch.ones(1) * (accelerator.process_index + 1), "sum")
print(f"rank={accelerator.process_index} device={accelerator.device} total={float(total)}",
      flush=True)
if accelerator.process_index == 1 and "--use-hpu" in sys.argv:
    torch.ones(1, device="hpu")
"""


def test_a_cpu_job_with_more_processes_than_gaudis_runs(tmp_path):
    """Importing the Gaudi software takes no device (the bridge's hccl import only names a
    module): 2 CPU processes on a 1-Gaudi server run; the rank that then takes a device it
    does not have is told so, naming the local rank."""
    script = tmp_path / "cpu_job.py"
    script.write_text(CPU_JOB)
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc_per_node", "2", str(script)]
    result = run("", emulated_env(tmp_path, devices=1), argv=argv, cwd=tmp_path)
    assert "rank=0 device=cpu:0 total=3.0" in result.stdout, result.stdout + result.stderr
    assert "rank=1 device=cpu:0 total=3.0" in result.stdout  # as Accelerate has it on a CPU
    used = run("", emulated_env(tmp_path, devices=1), argv=[*argv, "--use-hpu"], cwd=tmp_path,
               check=False)
    assert used.returncode != 0
    assert "LOCAL_RANK=1 exceeds the 1 visible Gaudi device(s)" in used.stderr, used.stderr[-3000:]


INFERENCE_PER_RANK = """
import sys, torch
from transformers import pipeline

generator = pipeline("text-generation", model=sys.argv[1])
out = generator("intel gaudi is", max_new_tokens=2, do_sample=False)
print(f"rank={torch.distributed.get_rank() if torch.distributed.is_initialized() else 'none'} "
      f"device={generator.device} text={bool(out[0]['generated_text'])}", flush=True)
"""


def test_three_processes_each_running_its_own_inference_run(tmp_path, tiny_model):
    """Three processes that start no process group are three independent programs, each
    with its own Gaudi: the rules of an HCCL group (no group of 3) are not theirs. A group
    of 3 is still refused when one starts (test_gaudi_e2e_emulator.py)."""
    script = tmp_path / "infer.py"
    script.write_text(INFERENCE_PER_RANK)
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc_per_node", "3", str(script), str(tiny_model)]
    result = run("", emulated_env(tmp_path, devices=3), argv=argv, cwd=tmp_path)
    assert result.stdout.count("rank=none device=hpu:0 text=True") == 3, (
        result.stdout + result.stderr[-3000:])
