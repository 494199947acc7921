"""Which backend compiles what, with the plugin active: ``hpu_backend`` for graphs on the
Gaudi, whatever the caller asked for; the caller's choice for graphs whose tensors are all on
another device (a model the user keeps on the CPU); a backend of the user's own, registered
with Dynamo under a name, everywhere."""

from __future__ import annotations

from processes import result_of

SCRIPT = """
import json
import torch
import torch._inductor.metrics as inductor
from accelerate import Accelerator
from hpu_emulator import counters

out = {}
# Accelerate told to stay on the CPU, with inductor: the CPU model is compiled by inductor
accelerator = Accelerator(cpu=True, dynamo_backend="inductor")
model = accelerator.prepare(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()))
x = torch.randn(4, 8)
out["cpu"] = [bool(torch.allclose(model(x), model._orig_mod(x), atol=1e-5)),
              inductor.generated_kernel_count > 0, counters.snapshot()["compiled_graphs"]]

# the same call for a model on the Gaudi: hpu_backend
gaudi = torch.compile(torch.nn.Linear(8, 8).to("hpu"), backend="inductor")
gaudi(x.to("hpu"))
out["hpu"] = counters.snapshot()["compiled_graphs"]

# a backend the user registered by name is theirs: kept, also on the Gaudi
from torch._dynamo import register_backend
seen = []

@register_backend(name="users_own_backend")
def users_own_backend(graph, inputs):
    seen.append([str(t.device) for t in inputs if isinstance(t, torch.Tensor)][:1])
    return graph.forward

mine = torch.compile(lambda t: t * 2 + 1, backend="users_own_backend")
out["own"] = [mine(torch.ones(2, device="hpu")).cpu().tolist(), seen]
print("RESULT" + json.dumps(out))
"""


def test_each_graph_is_compiled_for_its_device_and_a_named_user_backend_is_kept(run):
    done = run(SCRIPT)
    out = result_of(done.stdout)
    assert out["cpu"] == [True, True, 0], out
    assert out["hpu"] == 1, out
    assert out["own"] == [[3.0, 3.0], [["hpu:0"]]], out
    # the one warning is about the inductor call for the Gaudi's graphs, none for the user's
    assert "users_own_backend" not in done.stderr
