"""``habana_frameworks.torch.hpu.metrics`` on the emulator: the bridge's names, keys and
semantics, and the recipe-cache model of ``hpu_backend``."""

from __future__ import annotations

import pytest
from processes import result_of

BRIDGE_LOOP = """
import json, os, torch
from habana_frameworks.torch.hpu.metrics import metric_global, metric_localcontext, MetricNotFound
import habana_frameworks.torch.hpu as hthpu

out = {"same_module": hthpu.metric_global is metric_global}
out["zero"] = {n: dict(metric_global(n).stats()) for n in
               ("graph_compilation", "cpu_fallback", "memory_defragmentation")}
rc = metric_global("recipe_cache")
out["recipe_cache_present"] = rc is not None
out["unknown"] = metric_global("non-existing metric") is None
try:
    with metric_localcontext("non-existing"):
        pass
except MetricNotFound:
    out["local_unknown_raises"] = True

def step(t1, t2):  # the bridge's compute_single_step, compiled
    multiplied = t1 * t2
    summed = t1 + t2
    return (summed * multiplied).cpu()

# static graphs: the bridge's loop is lazy mode, a new graph per step (its loop count
# grows); a compiled static graph likewise compiles one recipe per shape
torch._dynamo.config.recompile_limit = 64  # dynamo's 8 graphs, then eager, would stop at 8
compiled = torch.compile(step, backend="hpu_backend", dynamic=False)
gc = metric_global("graph_compilation")
gc.reset()
totals, times = [], []
with metric_localcontext("graph_compilation") as local:
    for x in range(1, 11):
        compiled(torch.rand(10, 20, x).to("hpu"), torch.rand(10, 20, x).to("hpu"))
        stats = dict(gc.stats())
        totals.append(stats["TotalNumber"])
        times.append(stats["TotalTime"])
out["totals"], out["times"] = totals, times
out["local"] = dict(local.stats())["TotalNumber"]
out["keys"] = [k for k, _ in gc.stats()]
gc.reset()
for _ in range(10):
    compiled(torch.rand(1, 2, 3, 4).to("hpu"), torch.rand(1, 2, 3, 4).to("hpu"))
out["same_shape"] = dict(gc.stats())["TotalNumber"]
# a dynamic graph (symbolic sizes): ranged recipes, as the bridge's DynamicBucketInfo
dynamic = torch.compile(lambda a, b: (a + b) * (a * b), backend="hpu_backend", dynamic=True)
totals = []
with metric_localcontext("graph_compilation") as local:
    for x in range(1, 11):
        dynamic(torch.rand(10, 20, x).to("hpu"), torch.rand(10, 20, x).to("hpu")).cpu()
        totals.append(dict(local.stats())["TotalNumber"])
out["dynamic"] = totals
if rc is not None:
    out["rc"] = {k: v for k, v in rc.stats() if k in ("TotalHit", "TotalMiss")}
print("RESULT" + json.dumps(out))
"""




@pytest.mark.e2e
def test_the_bridges_shape_loop_counts_one_compilation_per_shape(run):
    out = result_of(run(BRIDGE_LOOP, {"PT_HPU_ENABLE_CACHE_METRICS": "1"}))
    assert out["same_module"] and out["unknown"] and out["local_unknown_raises"]
    assert out["zero"]["graph_compilation"] == {"TotalNumber": 0, "TotalTime": 0, "AvgTime": 0}
    assert out["zero"]["cpu_fallback"] == {"TotalNumber": 0, "FallbackOps": {}}
    assert out["zero"]["memory_defragmentation"]["TotalNumber"] == 0
    assert out["keys"] == ["TotalNumber", "TotalTime", "AvgTime"]
    # shapes [10, 20, x] for x in 1..10: one compilation each, total time growing
    assert out["totals"] == list(range(1, 11))
    assert all(b > a for a, b in zip(out["times"], out["times"][1:], strict=False)), out["times"]
    assert out["local"] == 10
    # the same shape ten times: the shapes above were cached; this one compiles once
    assert out["same_shape"] == 1
    assert out["recipe_cache_present"]
    # x = 1 is a static graph (dynamo specializes sizes 0 and 1); from x = 2 one dynamic
    # graph: a static recipe for 2, then at 3 a recipe for [2, 6], at 7 one for [2, 14]
    assert out["dynamic"] == [1, 2, 3, 3, 3, 3, 4, 4, 4, 4]
    assert out["rc"] == {"TotalHit": 9 + 6, "TotalMiss": 11 + 4}


@pytest.mark.e2e
def test_recipe_cache_metric_exists_only_when_asked_for_as_on_gaudi(run):
    out = run("""
        from habana_frameworks.torch.hpu.metrics import metric_global
        print("RC", metric_global("recipe_cache"))
    """)
    assert "RC None" in out


@pytest.mark.e2e
def test_training_compiles_a_forward_and_a_backward_graph_per_shape(run):
    out = run("""
        import torch
        from habana_frameworks.torch.hpu.metrics import metric_global
        layer = torch.nn.Linear(4, 4).to("hpu")
        f = torch.compile(lambda x: layer(x).sum(), backend="hpu_backend")
        for n in (3, 3, 5):
            f(torch.rand(n, 4).to("hpu")).backward()
        print("TOTAL", dict(metric_global("graph_compilation").stats())["TotalNumber"])
    """)
    assert "TOTAL 4" in out
