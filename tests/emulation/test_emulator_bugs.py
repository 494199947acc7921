"""Regressions of the emulator's boxed fallback, each checked against the CPU result of the
same code in the same script (the fallback runs CPU kernels, so results must be equal)."""

from __future__ import annotations

import socket
import sys
import textwrap

import pytest

pytestmark = pytest.mark.e2e

OPTIMIZERS = """
import torch

def train(device, make_opt):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(8)]).to(device)
    opt = make_opt(model.parameters())
    data = torch.Generator().manual_seed(1)
    for _ in range(50):
        x = torch.randn(4, 64, generator=data).to(device)
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    return [p.detach().cpu() for p in model.parameters()]

makers = {
    "adamw_fused": lambda p: torch.optim.AdamW(p, fused=True),
    "adam_fused_amsgrad": lambda p: torch.optim.Adam(p, fused=True, amsgrad=True),
    "adamw_foreach": lambda p: torch.optim.AdamW(p, foreach=True),
    "adamw_plain": lambda p: torch.optim.AdamW(p, foreach=False),
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9, foreach=False),
    "sgd_momentum_foreach": lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9, foreach=True),
    "sgd_momentum_fused": lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9, fused=True),
}
for name, make in makers.items():
    cpu, hpu = train("cpu", make), train("hpu", make)
    same = all(torch.equal(a, b) and bool(a.isfinite().all()) for a, b in zip(cpu, hpu))
    print(name, "equal" if same else "DIFFERENT", flush=True)
"""


def test_optimizers_over_50_steps_equal_cpu_and_do_not_crash(run):
    # _fused_adam_ returns nothing: its CPU views died with the stack before sync_back read them
    out = run(OPTIMIZERS).stdout.split("\n")
    results = dict(line.split() for line in out if line.strip())
    assert results == {
        name: "equal"
        for name in ("adamw_fused", "adam_fused_amsgrad", "adamw_foreach", "adamw_plain",
                     "sgd_momentum", "sgd_momentum_foreach", "sgd_momentum_fused")
    }


COLLECTIVES = """
import torch
import torch.distributed as dist

dist.init_process_group("hccl")
r, w = dist.get_rank(), dist.get_world_size()
base = torch.arange(6, dtype=torch.float32)
everyone = torch.cat([base + 100 * i for i in range(w)])
for ishape, oshape in [((2, 3), (w * 6,)), ((6,), (w, 6)), ((2, 3), (w, 2, 3)),
                       ((2, 3), (w * 2, 3)), ((6,), (w * 6,))]:
    out = torch.empty(oshape, device="hpu")
    dist.all_gather_into_tensor(out, (base + 100 * r).reshape(ishape).to("hpu"))
    assert out.device.type == "hpu" and out.shape == oshape
    assert torch.equal(out.cpu().flatten(), everyone), (ishape, oshape, out)
total = sum(i + 1 for i in range(w))
for ishape, oshape in [((w * 6,), (6,)), ((w * 2, 3), (6,)), ((w * 6,), (2, 3)),
                       ((w, 2, 3), (2, 3))]:
    out = torch.empty(oshape, device="hpu")
    inp = (torch.arange(w * 6, dtype=torch.float32) * (r + 1)).reshape(ishape)
    dist.reduce_scatter_tensor(out, inp.to("hpu"))
    expected = (torch.arange(w * 6, dtype=torch.float32) * total)[r * 6:(r + 1) * 6]
    assert torch.equal(out.cpu().flatten(), expected), (ishape, oshape, out)
try:
    dist.reduce_scatter_tensor(torch.empty(5, device="hpu"), torch.ones(w * 6, device="hpu"))
except RuntimeError as exc:
    assert "world_size" in str(exc), exc
else:
    raise AssertionError("a mis-sized reduce_scatter_tensor was accepted")
dist.barrier()
dist.destroy_process_group()
print(f"rank {r} ok")
"""

ACCELERATE_GATHER = """
import torch
from accelerate import Accelerator

acc = Accelerator()
r, w = acc.process_index, acc.num_processes
assert acc.state.distributed_type.value == "MULTI_HPU", acc.state.distributed_type
x = torch.arange(18, dtype=torch.float32, device=acc.device).view(1, 18) + 100 * r
g = acc.gather(x)
assert g.device.type == "hpu"
assert torch.equal(g.cpu(), torch.cat([torch.arange(18.0).view(1, 18) + 100 * i for i in range(w)]))
z = torch.arange(6, device=acc.device).view(2, 3) + 10 * r
assert acc.gather(z).cpu().tolist() == [[0, 1, 2], [3, 4, 5], [10, 11, 12], [13, 14, 15]]
assert acc.gather(torch.tensor(float(r), device=acc.device)).cpu().tolist() == [0.0, 1.0]
print(f"rank {r} ok")
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("script", [COLLECTIVES, ACCELERATE_GATHER], ids=["dist", "accelerate"])
def test_tensor_collectives_accept_any_shape_with_the_right_numel(run, tmp_path, script):
    # Gloo only takes a dim-0 concatenation; HCCL (like NCCL) takes any shape of the right size
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(script))
    out = run(
        "",
        {"HPU_PLUGIN_EMULATE_DEVICES": "2", "OMP_NUM_THREADS": "1"},
        args=[sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
              "--master_port", str(_free_port()), str(path)],
        timeout=300,
    )
    assert "rank 0 ok" in out.stdout and "rank 1 ok" in out.stdout
