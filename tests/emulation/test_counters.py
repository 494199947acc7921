"""The emulator's own counters: launches and host synchronisations, counted where they happen."""

from __future__ import annotations

from processes import result_of

SCRIPT = """
import json, torch
from hpu_emulator import counters

a = torch.ones(4, 4).to("hpu")          # a copy to the device: no launch, no sync
b = torch.ones(4, 4, device="hpu")      # a fill: one launch
counters.reset()
start = counters.snapshot()
c = a @ b                                 # one op
d = (c + 1).relu_()                       # two ops
e = d.clone()                             # one device-to-device copy... or an op
x = e.sum().item()                        # an op and a scalar read (a sync)
host = e.cpu()                            # a copy to the host (a sync)
torch.hpu.synchronize()                   # an explicit wait
eager = counters.snapshot()
counters.reset()
with counters.launch(counters.FUSED_KERNEL):   # many ops, one launch
    f = torch.nn.functional.softmax(a @ b, dim=-1) * 2
fused = counters.snapshot()
cpu_before = counters.snapshot()
torch.ones(3) + torch.ones(3)             # CPU work is not the device's
cpu_after = counters.snapshot()
graph = torch.compile(lambda t: (t * 2 + 1).relu().sum(dim=0), backend="hpu_backend")
graph(a)                                  # compiles (a recipe), then runs
counters.reset()
graph(a)                                  # one recipe run: one launch
compiled = counters.snapshot()
print("RESULT" + json.dumps({"start": start, "eager": eager, "fused": fused,
      "cpu": [cpu_before["launches"], cpu_after["launches"]], "compiled": compiled}))
"""




def test_launches_and_syncs_are_counted_per_kind(run):
    r = result_of(run(SCRIPT).stdout)
    assert all(v == 0 for v in r["start"].values()), r["start"]
    eager = r["eager"]
    # matmul, add, relu_, clone (its copy), sum: five launches; .item() is a read, not one
    assert eager["launches"] == eager["eager_ops"] + eager["copies_d2d"] == 5, eager
    assert eager["syncs"] == 3, eager  # .item(), .cpu(), synchronize()
    assert (eager["scalar_reads"], eager["copies_d2h"], eager["synchronize_calls"]) == (1, 1, 1)
    fused = r["fused"]
    assert fused["launches"] == fused["fused_kernels"] == 1, fused
    assert fused["eager_ops"] == 0 and fused["inner_ops"] >= 3, fused
    assert r["cpu"][0] == r["cpu"][1]
    compiled = r["compiled"]  # four ops in one compiled graph
    assert compiled["launches"] == compiled["compiled_graphs"] == 1, compiled
    assert compiled["eager_ops"] == 0 and compiled["inner_ops"] >= 4, compiled
