"""``fused_moe``: a mixture-of-experts model that names no ``experts_implementation`` gets
``"hpu_fused_moe"`` on Gaudi, whose entry in Transformers' ``ExpertsInterface`` runs the fused
kernel ``torch.ops.hpu.mixture_of_experts`` where it gives ``batched_mm``'s result.

Tiny Mixtral and Qwen3-MoE (SiLU experts, Transformers' default gate) on the emulated Gaudi:
greedy tokens equal the CPU's; a forward without gradients launches the kernel once per MoE
layer (the emulator's fused-kernel counter, other fast paths off) and fewer launches than
``batched_mm``; a forward that wants gradients, GPT-OSS (biases, its own clamped gate) and a
named ``batched_mm`` never launch it; AdamW losses equal the CPU's (training runs
``batched_mm`` under the fused name: the op has no autograd). With the fast path off
(``HPU_PLUGIN_FAST_MOE=0`` or ``HPU_PLUGIN_FAST=0``) the model gets ``batched_mm`` as before.
"""

from __future__ import annotations

import pytest
from processes import emulated, result_of, run_python

from .moe_models import PRELUDE

#: Transformers 4 has no experts interface (its MoE layers loop over their experts in Python):
#: nothing chooses an implementation there, so there is nothing to adapt.
EXPERTS_INTERFACE = int(pytest.importorskip("transformers").__version__.split(".")[0]) >= 5
needs_experts_interface = pytest.mark.skipif(
    not EXPERTS_INTERFACE, reason="Transformers 4 has no experts interface")
pytestmark = needs_experts_interface

SCRIPT = PRELUDE + r"""
from hpu_emulator import counters

def switches(**values):
    for name in ("HPU_PLUGIN_FAST", "HPU_PLUGIN_FAST_MOE"):
        os.environ.pop(name, None)
    os.environ.update(values)

def forward(model, grad):
    # the fused-kernel launches and all launches of one forward, eager
    ids = IDS.to("hpu")
    counters.reset()
    with torch.set_grad_enabled(grad):
        logits = model(input_ids=ids).logits
    now = counters.snapshot()
    if grad:
        logits.sum().backward()  # the batched_mm it fell back to trains
    return {"fused": now["fused_kernels"], "launches": now["launches"]}

result = {}
for name in MODELS:
    switches()
    cpu = made(name, "cpu", experts_implementation="grouped_mm")
    hpu = made(name, "hpu")
    entry = {"chosen": hpu.config._experts_implementation,
             "cpu_tokens": generate(cpu, "cpu"), "hpu_tokens": generate(hpu, "hpu"),
             "cpu_losses": train(made(name, "cpu", experts_implementation="grouped_mm"), "cpu"),
             "hpu_losses": train(made(name, "hpu"), "hpu")}
    # only this fast path on: the fused kernels counted are the MoE layers'
    switches(HPU_PLUGIN_FAST="0", HPU_PLUGIN_FAST_MOE="1")
    entry["fused"] = forward(made(name, "hpu").eval(), grad=False)
    entry["with_grad"] = forward(made(name, "hpu").eval(), grad=True)
    named = made(name, "hpu", experts_implementation="batched_mm")
    entry["named"] = [named.config._experts_implementation, forward(named.eval(), grad=False)]
    for label, values in (("moe_off", {"HPU_PLUGIN_FAST_MOE": "0"}),
                          ("all_off", {"HPU_PLUGIN_FAST": "0"}), ("all_on", {})):
        switches(**values)
        model = made(name, "hpu")
        entry[label] = [model.config._experts_implementation, forward(model.eval(), grad=False)]
    switches(HPU_PLUGIN_FAST_MOE="0")
    entry["off_tokens"] = generate(made(name, "hpu"), "hpu")
    result[name] = entry
# bfloat16: the router's float32 top-k weights are cast for the kernel, which (as the
# bridge's scatter of them into the activations' dtype) refuses them uncast
switches(HPU_PLUGIN_FAST="0", HPU_PLUGIN_FAST_MOE="1")
bf16 = {}
for label, kw in (("fused", {}), ("batched", {"experts_implementation": "batched_mm"})):
    model = made("mixtral", "hpu", **kw).to(torch.bfloat16).eval()
    counters.reset()
    with torch.no_grad():
        bf16[label] = model(input_ids=IDS.to("hpu")).logits.float().cpu()
    bf16[label + "_kernels"] = counters.snapshot()["fused_kernels"]
scale = float(bf16["batched"].abs().max())
experts = model.model.layers[0].mlp.experts
hidden = torch.randn(3, 32).to("hpu", torch.bfloat16)
weights, table = torch.topk(torch.rand(3, 4).to("hpu"), 2)
try:
    torch.ops.hpu.mixture_of_experts.fused_weights(
        hidden, table, weights, list(experts.gate_up_proj.unbind(0)),
        list(experts.down_proj.unbind(0)), True, "silu", 0, 3)
    refused = None
except RuntimeError as exc:
    refused = str(exc)
result["bf16"] = {"kernels": bf16["fused_kernels"], "batched_kernels": bf16["batched_kernels"],
                  "rel": float((bf16["fused"] - bf16["batched"]).abs().max()) / scale,
                  "refused": refused}
# the transposed layout (Aria's: gate_up_proj [E, H, 2I], down_proj [E, I, H]) is the
# kernel's unpermuted one: the same experts, transposed, give batched_mm's output
from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS
experts = made("mixtral", "hpu").model.layers[0].mlp.experts
hidden = torch.randn(5, 32).to("hpu")
weights, table = torch.topk(torch.softmax(torch.randn(5, 4), -1).to("hpu"), 2)
with torch.no_grad():
    reference = ALL_EXPERTS_FUNCTIONS["batched_mm"](experts, hidden, table, weights)
    counters.reset()
    plain = ALL_EXPERTS_FUNCTIONS["hpu_fused_moe"](experts, hidden, table, weights)
    experts.gate_up_proj.data = experts.gate_up_proj.data.transpose(1, 2).contiguous()
    experts.down_proj.data = experts.down_proj.data.transpose(1, 2).contiguous()
    experts.is_transposed = True
    transposed = ALL_EXPERTS_FUNCTIONS["hpu_fused_moe"](experts, hidden, table, weights)
result["layouts"] = {"kernels": counters.snapshot()["fused_kernels"],
                     "plain": float((plain - reference).abs().max()),
                     "transposed": float((transposed - reference).abs().max()),
                     "scale": float(reference.abs().max())}
# greedy generate() with every fast path on: the prefill runs eagerly, each later token is a
# graph hpu_backend compiled (inference_graphs) with the kernel in it; the emulator's kernel
# body runs once per MoE layer and forward either way (counted around it, not replaced)
from hpu_emulator.kernels import moe as emulated_moe
switches()
runs = []
body = emulated_moe._experts
emulated_moe._experts = lambda *args: runs.append(1) or body(*args)
model = made("mixtral", "hpu")
counters.reset()
tokens = generate(model, "hpu")
emulated_moe._experts = body
result["graphed"] = {"runs": len(runs), "compiled": counters.snapshot()["compiled_graphs"],
                     "tokens": tokens}
# undoing the plugin takes the entry and the choice back with the adapter's
from hpu_plugin import hosts
switches(HPU_PLUGIN_FAST="0", HPU_PLUGIN_FAST_MOE="1")  # the kernels counted are the MoE's
before = made("mixtral", "hpu").eval()  # made with the plugin: its config names the entry
with torch.no_grad():
    expected = before(input_ids=IDS.to("hpu")).logits.cpu()
hosts.uninstall()
counters.reset()
with torch.no_grad():
    after = before(input_ids=IDS.to("hpu")).logits.cpu()
result["undone"] = {"entry": ALL_EXPERTS_FUNCTIONS["hpu_fused_moe"].__name__,
                    "chosen": made("mixtral", "cpu").config._experts_implementation,
                    "kept_running": before.config._experts_implementation == "hpu_fused_moe"
                    and torch.allclose(after, expected, atol=1e-5),
                    "kernels_after": counters.snapshot()["fused_kernels"]}
print("RESULT" + json.dumps(result))
"""

FITS = ("mixtral", "qwen3_moe")
NAMES = (*FITS, "gpt_oss")
LAYERS = 2  # every layer of the tiny models is a MoE layer


@pytest.fixture(scope="module")
def moe() -> dict:
    done = run_python(SCRIPT, emulated(HF_HUB_OFFLINE="1"), timeout=400, check=True)
    return result_of(done.stdout)


@pytest.mark.parametrize("name", NAMES)
def test_unnamed_experts_get_the_fused_entry_on_gaudi(moe, name):
    assert moe[name]["chosen"] == "hpu_fused_moe"


@pytest.mark.parametrize("name", NAMES)
def test_greedy_tokens_are_the_cpus(moe, name):
    assert moe[name]["hpu_tokens"] == moe[name]["cpu_tokens"]
    assert moe[name]["off_tokens"] == moe[name]["cpu_tokens"]
    assert len(moe[name]["hpu_tokens"][0]) == 15  # 7 prompt tokens and 8 new ones


@pytest.mark.parametrize("name", FITS)
def test_a_forward_without_gradients_launches_the_kernel_once_per_layer(moe, name):
    fused, batched = moe[name]["fused"], moe[name]["all_off"][1]
    assert fused["fused"] == LAYERS
    assert batched["fused"] == 0
    assert fused["launches"] < batched["launches"]
    # the other fast paths on (attention, rotary): this one's switch takes its layers only
    assert moe[name]["all_on"][1]["fused"] - moe[name]["moe_off"][1]["fused"] == LAYERS


@pytest.mark.parametrize("name", NAMES)
def test_gradients_wanted_keep_batched_mm(moe, name):
    assert moe[name]["with_grad"]["fused"] == 0


def test_experts_the_kernel_does_not_compute_keep_batched_mm(moe):
    # GPT-OSS: biases and its own clamped gate
    assert moe["gpt_oss"]["fused"]["fused"] == 0


@pytest.mark.parametrize("name", NAMES)
def test_adamw_losses_are_the_cpus(moe, name):
    cpu, hpu = moe[name]["cpu_losses"], moe[name]["hpu_losses"]
    assert hpu == pytest.approx(cpu, rel=1e-4, abs=1e-5)
    assert cpu[-1] < cpu[0]


@pytest.mark.parametrize("name", NAMES)
def test_a_named_implementation_is_kept(moe, name):
    chosen, counted = moe[name]["named"]
    assert chosen == "batched_mm" and counted["fused"] == 0


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("switch", ["moe_off", "all_off"])
def test_the_fast_path_off_gives_batched_mm(moe, name, switch):
    assert moe[name][switch][0] == "batched_mm"
    assert moe[name]["all_off"][1]["fused"] == 0  # no fast path on: no fused kernel at all


def test_bfloat16_router_weights_are_cast_for_the_kernel(moe):
    bf16 = moe["bf16"]
    assert bf16["kernels"] == LAYERS and bf16["batched_kernels"] == 0
    assert bf16["rel"] < 2e-2  # the kernel rounds once where batched_mm sums in float32
    assert bf16["refused"] is not None and "router_weights" in bf16["refused"]


def test_the_transposed_layout_is_the_kernels_unpermuted_one(moe):
    layouts = moe["layouts"]
    assert layouts["kernels"] == 2
    assert layouts["plain"] <= 1e-6 * layouts["scale"]
    assert layouts["transposed"] <= 1e-6 * layouts["scale"]
    assert layouts["scale"] > 0


def test_graphed_decoding_steps_run_the_kernel(moe):
    graphed = moe["graphed"]
    assert graphed["tokens"] == moe["mixtral"]["cpu_tokens"]
    assert graphed["compiled"] >= 7  # the decoding steps after the prefill ran as graphs
    assert graphed["runs"] == LAYERS * 8  # the prefill and 7 graphed steps, each layer once


#: A third party that brings its own experts kernel says no from a ``tryfirst`` hook, to a
#: model that names the fused entry itself (so no choice was asked at creation): obeyed in
#: the eager prefill and in the graphs of the decoding steps, where the hook is asked as
#: each graph is made.
DECLINED = PRELUDE + r"""
from hpu_emulator import counters
from hpu_emulator.kernels import moe as emulated_moe
from hpu_plugin.hookspecs import hookimpl
from hpu_plugin.loader import PluginRecord
from hpu_plugin.registry import get_registry

class OwnKernel:
    asked = 0

    @hookimpl(tryfirst=True)
    def hpu_fast_path(self, name, context):
        if name != "fused_moe":
            return None
        OwnKernel.asked += 1
        return False

runs = []
body = emulated_moe._experts
emulated_moe._experts = lambda *args: runs.append(1) or body(*args)
get_registry().register(OwnKernel(), PluginRecord("own-kernel", "x", "own", "1", False))
model = made("mixtral", "hpu", experts_implementation="hpu_fused_moe")
counters.reset()
tokens = generate(model, "hpu")
print("RESULT" + json.dumps({"runs": len(runs), "asked": OwnKernel.asked, "tokens": tokens,
                             "compiled": counters.snapshot()["compiled_graphs"],
                             "cpu_tokens": generate(made("mixtral", "cpu"), "cpu")}))
"""


def test_a_third_party_no_is_obeyed_inside_the_graphs():
    declined = result_of(run_python(DECLINED, emulated(HF_HUB_OFFLINE="1"), timeout=400,
                                    check=True).stdout)
    assert declined["compiled"] >= 7  # the decoding steps ran as graphs
    assert declined["asked"] > 0 and declined["runs"] == 0
    assert declined["tokens"] == declined["cpu_tokens"]


def test_undoing_the_plugin_takes_the_entry_and_the_choice_back(moe):
    # a model made meanwhile goes on running: the entry is Transformers' batched_mm again
    assert moe["undone"] == {"entry": "batched_mm_experts_forward", "chosen": "grouped_mm",
                             "kept_running": True, "kernels_after": 0}


#: float16 DeepSeek-V3 whose expert 3 is never chosen (its score correction is -100) and would
#: overflow float16 if computed: the model's own experts never compute it.
UNCHOSEN_OVERFLOW = r"""
import copy, json, torch
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

config = DeepseekV3Config(
    vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
    n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
    first_k_dense_replace=0, n_group=1, topk_group=1, n_shared_experts=1, kv_lora_rank=16,
    q_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, pad_token_id=0,
    bos_token_id=1, eos_token_id=2)
torch.manual_seed(0)
model = DeepseekV3ForCausalLM(config).eval()
with torch.no_grad():
    for layer in model.model.layers:
        layer.mlp.gate.e_score_correction_bias.fill_(0.0)
        layer.mlp.gate.e_score_correction_bias[3] = -100.0
        layer.mlp.experts.gate_up_proj[3].mul_(400.0)
        layer.mlp.experts.down_proj[3].mul_(400.0)
model = model.half()
ids = torch.tensor([[5, 9, 14, 27, 3, 8, 11, 40]])
result = {}
for device, copy_ in (("cpu", copy.deepcopy(model)), ("hpu", model.to("hpu"))):
    with torch.no_grad():
        logits = copy_(input_ids=ids.to(device)).logits
        tokens = copy_.generate(input_ids=ids.to(device), max_new_tokens=6, do_sample=False)
    result[device] = {"finite": bool(torch.isfinite(logits).all()),
                      "tokens": tokens[0].tolist()}
print("RESULT" + json.dumps(result))
"""


def test_float16_keeps_the_experts_no_token_chose_out_of_the_sum():
    """The kernel computes every expert on every token and weighs the unchosen by 0: in
    float16 an unchosen expert that overflows would make 0 * inf = NaN. float16 keeps
    ``batched_mm``, which computes only the chosen pairs."""
    got = result_of(run_python(UNCHOSEN_OVERFLOW, emulated(), timeout=600, check=True).stdout)
    assert got["hpu"]["finite"] and got["cpu"]["finite"]
    assert got["hpu"]["tokens"] == got["cpu"]["tokens"]
