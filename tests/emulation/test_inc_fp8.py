"""Intel Neural Compressor's Gaudi fp8 flow, unchanged, on the emulated Gaudi 2 and 3.

Neural Compressor (``neural_compressor.torch.algorithms.fp8_quant``) is how Gaudi users run a
model in fp8: ``prepare`` with ``FP8Config(mode="MEASURE")`` patches the model's modules to
record input and weight maxima, ``finalize_calibration`` writes them to ``dump_stats_path``, and
``convert`` with ``mode="QUANTIZE"`` on a fresh model reads them back, quantizes the weights to
``float8_e4m3fn`` and replaces the modules by fp8 ones that call the bridge's
``cast_to_fp8_v2``, ``fp8_gemm_v2``, ``softmax_fp8``, ``conv2d_fp8`` and ``cast_from_fp8``
(their scalar-scale forms: its default scale format), and ``hpex.kernels.fp8_fused_sdpa``.
The script runs that flow on a tiny ``LlamaForCausalLM`` in bf16, built from a config and
taught a next-token rule in a few CPU steps (a randomly initialised model's logits are nearly
flat, so any rounding flips its greedy tokens), on an attention block written with ``Matmul``
and ``Softmax`` modules as optimum-habana writes its models, on optimum-habana's fused
attention module (``ModuleFusedSDPA``), and on two ``nn.Conv2d``.

Checked: the measurement files are written, hold what the model computed, and are what
``convert`` reads (none there: it refuses; one module's maximum changed: that module's scale
alone changes); every ``nn.Linear`` becomes Neural Compressor's ``PatchedLinear`` with fp8
weights; one patched linear, matmul, softmax and conv each equal torch's float8 dtypes on the
CPU with the scales Neural Compressor chose (E4M3 saturating at 240 on Gaudi2, 448 on Gaudi3);
greedy tokens of the fp8 model agree with the bf16 model's for at least 95% of tokens, and its
logits stay within 5% of their largest magnitude (E4M3 keeps 3 mantissa bits), and the fp8
attention blocks' and convolutions' outputs within 10% of the bf16 ones.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap

import pytest
from processes import TAUGHT_LLAMA, result_of

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(importlib.util.find_spec("neural_compressor") is None,
                       reason="neural-compressor is not installed (requirements/test.txt "
                       "pins it)"),
]

PATCHED = "neural_compressor.torch.algorithms.fp8_quant._quant_common.helper_modules"

FLOW = TAUGHT_LLAMA + r"""
import json
import os
import sys

import numpy as np
import torch
from torch import nn
from habana_frameworks.torch.hpex.kernels import FusedSDPA
from transformers import LlamaConfig, LlamaForCausalLM

from neural_compressor.torch.quantization import (
    FP8Config, convert, finalize_calibration, prepare)

work = sys.argv[1]
E4M3_MAX = 240.0 if torch.hpu.get_device_name() == "GAUDI2" else 448.0
trained, loss = taught_llama(200)
state = trained.state_dict()

def fresh():
    model = LlamaForCausalLM(cfg)
    model.load_state_dict(state)
    return model.to(torch.bfloat16).eval().to("hpu")

result = {"train_loss": loss.item()}
calib = [rows(2, 16) for _ in range(4)]
prompts = [torch.randint(0, V, (1, n), generator=gen) for n in (5, 8, 11, 6)]
dump = os.path.join(work, "llama", "measure")

# measure
ref = fresh()
seen = []
hook = ref.model.layers[0].self_attn.q_proj.register_forward_pre_hook(
    lambda mod, args: seen.append(args[0].float().abs().max().item()))
with torch.no_grad():
    for batch in calib:
        ref(batch.to("hpu"))
hook.remove()
measured = prepare(fresh(), FP8Config(mode="MEASURE", dump_stats_path=dump))
with torch.no_grad():
    for batch in calib:
        measured(batch.to("hpu"))
finalize_calibration(measured)
folder = os.path.dirname(dump)
result["files"] = sorted(f for f in os.listdir(folder) if os.path.isfile(os.path.join(folder, f)))
with open(dump + "_hooks_maxabs.json") as f:
    nodes = json.load(f)["Nodes"]
result["measured_modules"] = sorted(nodes)
result["q_proj_input_maxabs"] = [nodes["model.layers.0.self_attn.q_proj"]["inputs"][0][0][0],
                                 max(seen)]

# quantize a fresh model from the measurement
quant = convert(fresh(), FP8Config(mode="QUANTIZE", dump_stats_path=dump))
linears = {n: m for n, m in quant.named_modules() if n in nodes}
result["patched"] = sorted({f"{type(m).__module__}.{type(m).__name__}" for m in linears.values()})
result["weight_dtypes"] = sorted({str(m.weight.dtype) for m in linears.values()})
result["plain_linears_left"] = [n for n, m in quant.named_modules() if type(m) is nn.Linear]

# numerics of one patched module against torch's float8 on the CPU
down = quant.model.layers[0].mlp.down_proj
io = {}
hook = down.register_forward_hook(lambda mod, args, out: io.update(x=args[0], y=out))
with torch.no_grad():
    quant(calib[0].to("hpu"))
hook.remove()
w = state["model.layers.0.mlp.down_proj.weight"].to(torch.bfloat16).float()
s_in, s_w = float(down.scale_input), float(down.scale_weight)
w8 = (w.t() / s_w).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
x8 = (io["x"].float().cpu() / s_in).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
y_ref = ((x8.float() @ w8.float()) * (s_in * s_w)).to(torch.bfloat16)
result["weight_equal"] = torch.equal(down.weight.cpu().view(torch.uint8), w8.view(torch.uint8))
result["output_err"] = (io["y"].float().cpu() - y_ref.float()).abs().max().item()
result["output_scale"] = y_ref.float().abs().max().item()
result["scales"] = [s_in, s_w]

# greedy tokens and logits against bf16
agree = total = 0
err = peak = 0.0
with torch.no_grad():
    for p in prompts:
        kw = {"max_new_tokens": 16, "min_new_tokens": 16, "do_sample": False}
        a = ref.generate(p.to("hpu"), **kw).cpu()[0, p.shape[1]:]
        b = quant.generate(p.to("hpu"), **kw).cpu()[0, p.shape[1]:]
        agree += (a == b).sum().item()
        total += a.numel()
        full = torch.cat([p[0], a]).unsqueeze(0).to("hpu")
        la, lb = ref(full).logits.float().cpu(), quant(full).logits.float().cpu()
        err = max(err, (la - lb).abs().max().item())
        peak = max(peak, la.abs().max().item())
result["agree"] = [agree, total]
result["logits_err"] = [err, peak]

# the measurement is what convert reads: without it convert refuses, and a changed input
# maximum changes that module's scale alone
try:
    convert(fresh(), FP8Config(mode="QUANTIZE",
                               dump_stats_path=os.path.join(work, "none", "measure")))
    result["missing"] = "converted"
except FileNotFoundError as exc:
    result["missing"] = str(exc)
data = np.load(dump + "_hooks_maxabs.npz", allow_pickle=True)["arr_0"].item()
data["Nodes"]["model.layers.0.self_attn.q_proj"]["inputs"][0] *= 256
edited = os.path.join(work, "edited", "measure")
os.makedirs(os.path.dirname(edited))
np.savez(edited + "_hooks_maxabs.npz", data)
again = convert(fresh(), FP8Config(mode="QUANTIZE", dump_stats_path=edited))
scale_of = lambda model: {n: float(m.scale_input) for n, m in model.named_modules()
                           if n in nodes}
before, after = scale_of(quant), scale_of(again)
result["changed_scales"] = {n: [before[n], after[n]] for n in nodes if before[n] != after[n]}

# an attention block written as optimum-habana writes its models, with Matmul and Softmax
# modules, which Neural Compressor patches into fp8 matmuls and the fp8 softmax
class Matmul(nn.Module):
    def forward(self, *args, **kwargs):
        return torch.matmul(*args, **kwargs)

class Softmax(nn.Module):
    def forward(self, x, dim=None, invAttnHead=None):
        return torch.softmax(x, dim)

class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(64, 192, bias=False)
        self.matmul_qk = Matmul()
        self.softmax = Softmax()
        self.matmul_av = Matmul()

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, 4, 16).permute(2, 0, 3, 1, 4)
        probs = self.softmax(self.matmul_qk(q, k.transpose(-1, -2)) * 0.25, -1)
        return self.matmul_av(probs, v).transpose(1, 2).reshape(b, t, 64)

def attention():
    torch.manual_seed(0)
    return Attention().to(torch.bfloat16).eval().to("hpu")

xs = [torch.randn(2, 12, 64, generator=gen).to(torch.bfloat16) for _ in range(3)]
dump = os.path.join(work, "attention", "measure")
measured = prepare(attention(), FP8Config(mode="MEASURE", dump_stats_path=dump))
with torch.no_grad():
    for x in xs:
        measured(x.to("hpu"))
finalize_calibration(measured)
quant = convert(attention(), FP8Config(mode="QUANTIZE", dump_stats_path=dump))
result["attention_patched"] = {n: type(m).__name__ for n, m in quant.named_children()}
io = {}

def keep(name):
    def hook(mod, args, out):
        io[name] = ([a.cpu() if torch.is_tensor(a) else a for a in args], out.cpu())
    return hook

hooks = [getattr(quant, n).register_forward_hook(keep(n)) for n in ("matmul_qk", "softmax")]
with torch.no_grad():
    got = quant(xs[0].to("hpu")).float().cpu()
    want = attention()(xs[0].to("hpu")).float().cpu()
for hook in hooks:
    hook.remove()

def fp8(t, scale_inv):
    return (t.float() * scale_inv).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float()

mm = quant.matmul_qk
(a, b), out = io["matmul_qk"]
mm_ref = (fp8(a, float(mm.quant_input_0.scale_inv)) @ fp8(b, float(mm.quant_input_1.scale_inv))
          * (float(mm.scale_input) * float(mm.scale_other))).to(torch.bfloat16)
sm = quant.softmax
(scores, _dim), probs = io["softmax"]
sm_ref = (fp8(torch.softmax(scores.float(), -1), float(sm.scale_output))
          * float(sm.dequant_output.scale)).to(torch.bfloat16)
result["attention_module_errs"] = [(out.float() - mm_ref.float()).abs().max().item(),
                                   (probs.float() - sm_ref.float()).abs().max().item()]
result["attention_rel_err"] = ((got - want).abs().max() / want.abs().max()).item()

# convolutions: Neural Compressor's patched Conv2d calls the bridge's conv2d_fp8
def convs():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(8, 4, 3, stride=2)).to(torch.bfloat16).eval().to("hpu")

images = [torch.randn(2, 3, 12, 12, generator=gen).to(torch.bfloat16) for _ in range(3)]
dump = os.path.join(work, "conv", "measure")
measured = prepare(convs(), FP8Config(mode="MEASURE", dump_stats_path=dump))
with torch.no_grad():
    for x in images:
        measured(x.to("hpu"))
finalize_calibration(measured)
quant = convert(convs(), FP8Config(mode="QUANTIZE", dump_stats_path=dump))
result["conv_patched"] = [type(m).__name__ for m in quant]
first = quant[0]
with torch.no_grad():
    got = quant(images[0].to("hpu")).float().cpu()
    want = convs()(images[0].to("hpu")).float().cpu()
    out = first(images[0].to("hpu")).float().cpu()
s_in, s_w = float(first.scale_input), float(first.scale_weight)
conv_ref = torch.nn.functional.conv2d(
    fp8(images[0], 1 / s_in), first.weight.cpu().float(), None, 1, 1) * (s_in * s_w)
conv_ref = (conv_ref + first.bias.cpu().float().view(1, -1, 1, 1)).to(torch.bfloat16)
result["conv_module_err"] = (out - conv_ref.float()).abs().max().item()
result["conv_rel_err"] = ((got - want).abs().max() / want.abs().max()).item()

# optimum-habana's fused attention (ModuleFusedSDPA around hpex FusedSDPA, grouped-query):
# Neural Compressor measures it through the bridge's fp8_fused_sdpa in bf16 (input maxima and
# the softmax's amax) and runs it with fp8 q, k, v, probabilities and output
class ModuleFusedSDPA(nn.Module):
    # optimum-habana's wrapper (models/llama/modeling_llama.py), which Neural Compressor patches
    def __init__(self, fusedSDPA):
        super().__init__()
        self._hpu_kernel_fsdpa = fusedSDPA
    def forward(self, query, key, value, attn_mask, dropout_p, is_causal, scale, softmax_mode,
                recompute_mode, valid_sequence_lengths, padding_side="left"):
        return self._hpu_kernel_fsdpa.apply(query, key, value, attn_mask, dropout_p, is_causal,
                                            scale, softmax_mode, recompute_mode,
                                            valid_sequence_lengths, padding_side)

class FusedAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(64, 128, bias=False)
        self.fused_scaled_dot_product_attention = ModuleFusedSDPA(FusedSDPA)
    def forward(self, x):
        b, t, _ = x.shape
        q = self.qkv(x)[..., :64].view(b, t, 4, 16).transpose(1, 2)
        k, v = self.qkv(x)[..., 64:].view(b, t, 2, 2, 16).permute(2, 0, 3, 1, 4)
        out = self.fused_scaled_dot_product_attention(q, k, v, None, 0.0, True, None, "None",
                                                      None, None, "left")
        return out.transpose(1, 2).reshape(b, t, 64)

def fused():
    torch.manual_seed(0)
    return FusedAttention().to(torch.bfloat16).eval().to("hpu")

xs = [torch.randn(2, 12, 64, generator=gen).to(torch.bfloat16) for _ in range(3)]
dump = os.path.join(work, "sdpa", "measure")
measured = prepare(fused(), FP8Config(mode="MEASURE", dump_stats_path=dump))
with torch.no_grad():
    for x in xs:
        measured(x.to("hpu"))
finalize_calibration(measured)
with open(dump + "_hooks_maxabs.json") as f:
    node = json.load(f)["Nodes"]["fused_scaled_dot_product_attention"]
result["sdpa_measured"] = node
quant = convert(fused(), FP8Config(mode="QUANTIZE", dump_stats_path=dump))
sdpa = quant.fused_scaled_dot_product_attention
result["sdpa_patched"] = type(sdpa).__name__
io = {}
hook = sdpa.register_forward_hook(
    lambda m, a, o: io.update(args=[t.cpu() for t in a[:3]], out=o.cpu()))
with torch.no_grad():
    got = quant(xs[0].to("hpu")).float().cpu()
    want = fused()(xs[0].to("hpu")).float().cpu()
hook.remove()
q, k, v = io["args"]
sq, sk, sv = float(sdpa.scale_q), float(sdpa.scale_k), float(sdpa.scale_v)
Q, K, V = fp8(q, 1 / sq) * sq, fp8(k, 1 / sk) * sk, fp8(v, 1 / sv) * sv
K, V = K.repeat_interleave(2, 1), V.repeat_interleave(2, 1)
s = (Q @ K.transpose(-1, -2)) / 4.0
s = s.masked_fill(~torch.ones(12, 12, dtype=torch.bool).tril(), float("-inf"))
P = fp8(torch.softmax(s, -1), float(sdpa.scale_amax)) * float(sdpa.descale_amax)
O = fp8(P @ V, float(sdpa.scale_output)) / float(sdpa.scale_output)
ref = O.to(torch.bfloat16).float()
result["sdpa_scales"] = [sq, sk, sv, float(sdpa.descale_amax), float(sdpa.scale_output)]
result["sdpa_module_err"] = (io["out"].float() - ref).abs().max().item()
result["sdpa_rel_err"] = ((got - want).abs().max() / want.abs().max()).item()
print("RESULT" + json.dumps(result))
"""


@pytest.fixture(scope="module", params=["gaudi2", "gaudi3"])
def flow(request, emulator_built, tmp_path_factory) -> tuple[str, dict]:
    """One run of the whole flow per generation; the tests read its result."""
    from conftest import run_script

    work = tmp_path_factory.mktemp(f"inc_{request.param}")
    argv = [sys.executable, "-c", textwrap.dedent(FLOW), str(work)]
    done = run_script("", {"HPU_PLUGIN_EMULATE": request.param}, args=argv)
    return request.param, result_of(done.stdout)


def test_measurement_is_written_and_reused_by_convert(flow):
    _, r = flow
    assert r["train_loss"] < 0.05
    assert r["files"] == ["measure_hooks_maxabs.json", "measure_hooks_maxabs.npz",
                          "measure_hooks_maxabs_mod_list.json"]
    layers = [f"model.layers.{i}.{part}" for i in range(2) for part in (
        "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")]
    assert r["measured_modules"] == sorted([*layers, "lm_head"])
    measured, computed = r["q_proj_input_maxabs"]
    assert measured == computed > 0
    assert "Failed to load file" in r["missing"]
    # 256 times the input maximum: the power-of-two scale moves up, the others stay
    [(name, (before, after))] = r["changed_scales"].items()
    assert name == "model.layers.0.self_attn.q_proj" and after > before


def test_linears_become_fp8_modules_computing_as_torch_float8(flow):
    _, r = flow
    assert r["patched"] == [f"{PATCHED}.PatchedLinear"]
    assert r["weight_dtypes"] == ["torch.float8_e4m3fn"]
    assert r["plain_linears_left"] == []
    assert r["weight_equal"] is True
    assert r["output_err"] <= 1e-6 * max(1.0, r["output_scale"])
    assert r["attention_patched"] == {"qkv": "PatchedLinear", "matmul_qk": "PatchedMatmul",
                                      "softmax": "PatchedSoftmax",
                                      "matmul_av": "PatchedMatmul"}
    assert r["attention_module_errs"] == [0.0, 0.0]
    assert 0.0 < r["attention_rel_err"] <= 0.1
    assert r["conv_patched"] == ["PatchedConv2d", "ReLU", "PatchedConv2d"]
    assert r["conv_module_err"] == 0.0
    assert 0.0 < r["conv_rel_err"] <= 0.1


def test_fused_attention_is_measured_and_runs_in_fp8(flow):
    """optimum-habana's ``ModuleFusedSDPA``: measured through ``fp8_fused_sdpa`` (q, k, v
    maxima, the output's and the probabilities' amax, 1.0 under a causal mask), then run
    with fp8 q, k, v, probabilities and output, equal to the CPU reference built from torch's
    float8 with Neural Compressor's scales."""
    _, r = flow
    assert r["sdpa_patched"] == "PatchedModuleFusedSDPA"
    inputs, outputs = r["sdpa_measured"]["inputs"], r["sdpa_measured"]["outputs"]
    assert len(inputs) == 3 and all(value[0][0] > 0 for value in inputs)
    assert len(outputs) == 2 and outputs[1][0][0] == 1.0
    assert r["sdpa_module_err"] == 0.0
    assert 0.0 < r["sdpa_rel_err"] <= 0.1


def test_fp8_greedy_tokens_agree_with_bf16(flow):
    generation, r = flow
    agree, total = r["agree"]
    err, peak = r["logits_err"]
    print(f"{generation}: {agree}/{total} tokens agree, max logits error {err:.4f} "
          f"of {peak:.2f}")
    assert total == 64
    assert agree / total >= 0.95
    assert 0.0 < err <= 0.05 * peak
