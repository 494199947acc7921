"""Barriers on two emulated Gaudi devices, as ``ProcessGroupHCCL::barrier`` behaves on hardware.

The bridge's barrier ignores ``BarrierOptions``: ``barrier(device_ids=[local_rank])`` (what
Accelerate's ``wait_for_everyone`` calls under MULTI_HPU) works in every rank, while the
one-device-per-process rule still refuses ``hpu:1`` everywhere else.
"""

from __future__ import annotations

import sys

import pytest

pytestmark = pytest.mark.e2e


def _torchrun(run, tmp_path, source: str, *args: str):
    script = tmp_path / "job.py"
    script.write_text(source)
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc_per_node", "2", str(script), *args]
    env = {"HPU_PLUGIN_EMULATE_DEVICES": "2", "OMP_NUM_THREADS": "1",
           "HF_HOME": str(tmp_path / "hf_home")}
    return run("", env, args=argv)


def _reports(stdout: str) -> dict[str, dict[str, str]]:
    """``rank=N key=value ...`` lines, by rank."""
    found: dict[str, dict[str, str]] = {}
    for line in stdout.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "rank" in fields:
            found[fields["rank"]] = fields
    return found


BARRIERS = """
import os, sys, time
import torch
import torch.distributed as dist
from accelerate import PartialState

dist.init_process_group("hccl")
rank, local = dist.get_rank(), int(os.environ["LOCAL_RANK"])
if rank == 0:
    time.sleep(1.5)  # rank 1 must wait for this in the barrier
start = time.monotonic()
dist.barrier(device_ids=[local])
waited = time.monotonic() - start
work = dist.barrier(device_ids=[local], async_op=True)
work.wait()
pair = dist.new_group([0, 1], backend="hccl")
dist.barrier(group=pair, device_ids=[local])
t = torch.full((2,), float(rank + 1), device="hpu")
dist.all_reduce(t)  # collectives still run after the barriers
try:
    torch.empty(1, device=f"hpu:{local}")
    refused = "none"
except RuntimeError as exc:
    refused = "active" if "habana active device: 1 != 0" in str(exc) else repr(exc)

# Accelerate on the same job: wait_for_everyone is barrier(device_ids=[local_process_index])
state = PartialState()
marker = os.path.join(sys.argv[1], "written-by-main")
with state.main_process_first():
    if state.is_main_process:
        time.sleep(1.0)
        open(marker, "w").write("ok")
    seen = os.path.exists(marker)
start = time.monotonic()
if state.is_main_process:
    time.sleep(1.5)
state.wait_for_everyone()
acc_waited = time.monotonic() - start
print(f"rank={rank} waited={waited:.2f} sum={t.tolist()[0]} refused={refused} "
      f"type={state.distributed_type} backend={state.backend} seen={seen} "
      f"acc_waited={acc_waited:.2f}", flush=True)
"""


def test_barrier_and_wait_for_everyone_with_device_ids_on_every_rank(run, tmp_path):
    barriers = _reports(_torchrun(run, tmp_path, BARRIERS, str(tmp_path)).stdout)
    assert sorted(barriers) == ["0", "1"], barriers
    assert float(barriers["1"]["waited"]) > 1.0  # the barrier really held rank 1 back
    for rank in barriers.values():
        assert rank["sum"] == "3.0"
        assert rank["type"].endswith("MULTI_HPU") and rank["backend"] == "hccl"
        assert rank["seen"] == "True"  # main_process_first: rank 1 ran after the main one
    assert float(barriers["1"]["acc_waited"]) > 1.0  # wait_for_everyone held rank 1 back
    # the one-device rule is not relaxed: only the barrier ignores device_ids
    assert barriers["0"]["refused"] == "none"
    assert barriers["1"]["refused"] == "active"


TRAINER = """
import os, sys, time
import torch
import torch.distributed as dist
from safetensors.torch import load_file
from torch.utils.data import Dataset
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

OUT = sys.argv[1]


class Tokens(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        ids = torch.randint(0, 256, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


args = TrainingArguments(output_dir=OUT, per_device_train_batch_size=2,
                         per_device_eval_batch_size=2, max_steps=2, save_strategy="steps",
                         save_steps=2, report_to=[], bf16=True)
marker = os.path.join(OUT, "prepared")
with args.main_process_first(desc="prepare"):
    if args.process_index == 0:
        time.sleep(1.0)
        os.makedirs(OUT, exist_ok=True)
        open(marker, "w").write("ok")
    seen = os.path.exists(marker)
torch.manual_seed(0)
config = LlamaConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     num_key_value_heads=1, intermediate_size=64, vocab_size=256)
trainer = Trainer(model=LlamaForCausalLM(config), args=args, train_dataset=Tokens(16),
                  eval_dataset=Tokens(8))
trainer.train()
metrics = trainer.evaluate()
trainer.save_model(OUT)
trainer.accelerator.wait_for_everyone()
saved = load_file(os.path.join(OUT, "model.safetensors"))
own = trainer.model.state_dict()
same = all(torch.equal(saved[k], own[k].cpu()) for k in saved)
print(f"rank={dist.get_rank()} device={args.device.type} backend={dist.get_backend()} "
      f"seen={seen} eval_loss={metrics['eval_loss']:.6f} same={same} "
      f"checkpoint={os.path.isdir(os.path.join(OUT, 'checkpoint-2'))}", flush=True)
"""


def test_two_process_trainer_trains_evaluates_and_saves(run, tmp_path):
    out = tmp_path / "out"
    reports = _reports(_torchrun(run, tmp_path, TRAINER, str(out)).stdout)
    assert sorted(reports) == ["0", "1"], reports
    for rank in reports.values():
        assert rank["device"] == "hpu" and rank["backend"] == "hccl"
        assert rank["seen"] == "True"  # main_process_first held rank 1 back
        assert rank["same"] == "True"  # the saved weights are the trained ones
        assert rank["checkpoint"] == "True"
    # evaluation is gathered across ranks: both see the same loss
    assert reports["0"]["eval_loss"] == reports["1"]["eval_loss"]
