"""torchrun on the emulated server: collectives on ``hccl`` and DDP, two processes."""

from __future__ import annotations

import re
import socket
import sys
import textwrap

import pytest

pytestmark = pytest.mark.e2e

SCRIPT = """
import os
import torch
import torch.distributed as dist

dist.init_process_group("hccl")
rank, world = dist.get_rank(), dist.get_world_size()
assert world == 2 and dist.get_backend() == "hccl"
# each local process acquired its own module (set by the hccl import)
assert os.environ["HLS_MODULE_ID"] == os.environ["LOCAL_RANK"]
assert torch.hpu.device_count() == 2 and torch.hpu.current_device() == 0

t = torch.full((4,), float(rank + 1), device="hpu")
dist.all_reduce(t)
assert t.device.type == "hpu" and t.tolist() == [3.0] * 4

parts = [torch.empty(2, device="hpu") for _ in range(world)]
dist.all_gather(parts, torch.full((2,), float(rank), device="hpu"))
assert [p.tolist() for p in parts] == [[0.0, 0.0], [1.0, 1.0]]

b = torch.full((3,), float(rank + 10), device="hpu")
dist.broadcast(b, src=1)
assert b.tolist() == [11.0] * 3

try:
    dist.all_reduce(torch.ones(2))
except RuntimeError:
    pass
else:
    raise AssertionError("hccl accepted a CPU tensor")

torch.manual_seed(rank)  # different initial weights: DDP must broadcast rank 0's
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
ddp = torch.nn.parallel.DistributedDataParallel(model.to("hpu"), device_ids=[0])
opt = torch.optim.AdamW(ddp.parameters(), lr=1e-2)
for _ in range(3):
    x = torch.randn(4, 8, device="hpu")  # different data per rank
    ddp(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
flat = torch.cat([p.detach().flatten() for p in model.parameters()])
copies = [torch.empty_like(flat) for _ in range(world)]
dist.all_gather(copies, flat)
assert torch.equal(copies[0].cpu(), copies[1].cpu())
dist.barrier()
dist.destroy_process_group()
print(f"rank {rank} ok")
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(run, tmp_path, script: str, env: dict[str, str], check: bool = True):
    """``script`` under torchrun with two local processes, the emulator on."""
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(script))
    return run(
        "",
        {**env, "OMP_NUM_THREADS": "1"},
        args=[sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
              "--master_port", str(_free_port()), str(path)],
        timeout=300,
        check=check,
    )


def test_torchrun_collectives_and_ddp_on_hccl(run, tmp_path):
    out = _torchrun(run, tmp_path, SCRIPT, {"HPU_PLUGIN_EMULATE_DEVICES": "2"})
    assert "rank 0 ok" in out.stdout and "rank 1 ok" in out.stdout


CUDA_RECIPE_DDP = """
import os
import sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group()
local_rank = int(os.environ["LOCAL_RANK"])
torch.hpu.set_device(local_rank)
model = torch.nn.Linear(4, 2).to("hpu")


def say(line):  # one write a line: the two ranks share the pipe
    sys.stdout.write(line + "\\n")
    sys.stdout.flush()


try:
    DDP(model, device_ids=[local_rank])  # the CUDA recipe with "cuda" replaced by "hpu"
except ValueError as exc:
    say(f"rank {local_rank} refused: {exc}")
else:
    say(f"rank {local_rank} built")
# a device without its index is the current one, as torch.device("cuda") is on CUDA
say(f"rank {local_rank} bare ids {DDP(model, device_ids=[torch.device('hpu')]).device_ids}")
ddp = DDP(model)  # the fix the refusal names
ddp(torch.randn(3, 4, device="hpu")).sum().backward()
dist.destroy_process_group()
say(f"rank {local_rank} trained")
"""


def test_ddp_bound_to_the_local_rank_is_refused_with_the_fix(run, tmp_path):
    # Without the check, rank 1's first forward fails in the device guard ("habana active
    # device: 1 != 0") and rank 0 sees its peer gone; without the current index filled in,
    # torch hands DDP's logger [None] for torch.device("hpu") and it raises a TypeError.
    out = _torchrun(run, tmp_path, CUDA_RECIPE_DDP, {"HPU_PLUGIN_EMULATE_DEVICES": "2"})
    assert "rank 0 built" in out.stdout, out.stdout
    refusal = re.search(r"rank 1 refused: [^\n]*", out.stdout)
    assert refusal is not None, out.stdout
    refusal = refusal.group(0)
    assert "device_ids=[1]" in refusal and "hpu:0" in refusal, refusal
    assert "leave device_ids out" in refusal and "device_ids=[0]" in refusal, refusal
    assert "rank 0 trained" in out.stdout and "rank 1 trained" in out.stdout, out.stdout
    assert "rank 0 bare ids [0]" in out.stdout and "rank 1 bare ids [0]" in out.stdout


TRAINER = """
import tempfile
import torch
import torch.distributed as dist
from torch.utils.data import Dataset
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments


class Tokens(Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        ids = torch.randint(0, 1000, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


torch.manual_seed(0)
config = LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, intermediate_size=128, vocab_size=1000)
args = TrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=2,
                         max_steps=2, bf16=True, report_to=[], save_strategy="no")
assert args.device.type == "hpu", args.device
trainer = Trainer(model=LlamaForCausalLM(config), args=args, train_dataset=Tokens())
trainer.train()
state = trainer.accelerator.state
assert state.distributed_type.value == "MULTI_HPU", state.distributed_type
assert dist.get_backend() == "hccl"
flat = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
copies = [torch.empty_like(flat) for _ in range(2)]
dist.all_gather(copies, flat)
assert torch.equal(copies[0].cpu(), copies[1].cpu())
print(f"rank {dist.get_rank()} ok")
"""


def test_trainer_under_torchrun_chooses_multi_hpu_and_hccl(run, tmp_path):
    out = _torchrun(run, tmp_path, TRAINER, {"HPU_PLUGIN_EMULATE_DEVICES": "2"})
    assert "rank 0 ok" in out.stdout and "rank 1 ok" in out.stdout


def test_unsupported_module_group_is_refused_before_any_collective(run, tmp_path):
    # The DDP plugin refuses this group earlier (tests/gaudi); with it off, the emulated
    # HCCL must refuse it on its own, as Gaudi's HCCL does.
    job = "import torch.distributed as dist\ndist.init_process_group('hccl')\nprint('initialized')"
    env = {"HABANA_VISIBLE_MODULES": "1,2", "HPU_PLUGIN_DISABLE": "ddp"}
    out = _torchrun(run, tmp_path, job, env, check=False)
    assert out.returncode != 0
    assert "initialized" not in out.stdout
    assert "this job uses modules 1,2" in out.stderr
    assert "HABANA_VISIBLE_MODULES" in out.stderr
