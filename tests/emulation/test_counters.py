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


RECIPES_AND_GRAPHS = """
import json, torch
import habana_frameworks.torch.core as htcore
from habana_frameworks.torch.hpu.metrics import metric_global
from hpu_emulator import counters

def compilations():
    return dict(metric_global("graph_compilation").stats())["TotalNumber"]

a = torch.ones(4, 4).to("hpu")
runs = []
for _ in range(2):
    counters.reset()
    before = compilations()
    b = (a @ a + 1).relu()
    b.sum().item()                # a host read: in lazy mode it runs the queued ops
    c = b * 2
    htcore.mark_step()            # lazy mode: runs the ops queued since the read
    runs.append({**counters.snapshot(), "compilations": compilations() - before})
counters.reset()
a @ torch.ones(4, 8, device="hpu")   # a new shape: one more eager recipe
runs.append(counters.snapshot())
print("RESULT" + json.dumps(runs))
"""


def test_eager_ops_compile_a_recipe_per_new_signature_outside_the_public_metric(run):
    # the bridge compiles an eager recipe for each op with a new signature and publishes no
    # GRAPH_COMPILE for it (synapse_helpers/graph.cpp: non-eager graphs only)
    first, second, new_shape = result_of(run(RECIPES_AND_GRAPHS).stdout)
    # matmul, add, relu, sum, mul: five launches, five recipes, none of them in the metric
    assert first["launches"] == 5 and first["eager_recipes"] == 5, first
    assert first["compilations"] == 0 and first["lazy_graphs"] == 0, first
    assert second["launches"] == 5 and second["eager_recipes"] == 0, second
    # the fill of the new operand and the matmul of new shapes
    assert new_shape["eager_recipes"] == 2, new_shape


def test_lazy_mode_counts_a_launch_per_graph_a_gaudi_runs(run):
    # the ops before the read are one graph, those after it and before mark_step another;
    # each a compilation the first time, a recipe-cache hit after
    first, second, _ = result_of(run(RECIPES_AND_GRAPHS, {"PT_HPU_LAZY_MODE": "1"}).stdout)
    assert first["launches"] == first["lazy_graphs"] == 2, first
    assert first["eager_ops"] == 5 and first["syncs"] == 1, first  # the ops: not launches
    assert first["compilations"] == 2 and first["eager_recipes"] == 0, first
    assert second["launches"] == 2 and second["compilations"] == 0, second
