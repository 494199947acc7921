"""The bridge's fp8 fused attention on the emulated Gaudi: ``hpex.kernels.fp8_fused_sdpa`` and
the ops under it (``fp8_sdpa_recomp_fwd``, its ``.scalar`` form, ``fp8_sdpa_fwd``), which
Intel Neural Compressor's patched ``ModuleFusedSDPA`` calls, and the eager-only
``mixture_of_experts.fp8_measurement`` forms its MoE measure run calls.

The attention cases are the bridge's own op test (``test_hpu_sdpa_fp8.py``: batch 3, 4 heads,
16 queries over 32 keys, head size 8, causal or with a random additive mask, recompute on and
off): a measure run with bf16 inputs returns the bf16 output and the probabilities' amax, an
fp8 run with q, k, v cast by the test's power-of-two scales (Gaudi2's four hardware scales,
any power of two on Gaudi3) returns an output within the test's tolerance (atol 0.4) of the
bf16 reference; the E4M3 output, divided by its scale, too.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e

BRIDGE_CASES = r"""
import math, torch, torch.nn.functional as F
import habana_frameworks.torch.hpu as ht
from habana_frameworks.torch.hpex.kernels import fp8_fused_sdpa

GAUDI3 = torch.hpu.get_device_name() == "GAUDI3"
h = lambda t: None if t is None else t.to("hpu")

def scales(t, is_amax=False, limit=None):
    # the bridge test's get_scale_values
    top = t.item() if is_amax else t.abs().max().float().item()
    lg2 = int(math.log2(240 * 0.9 / top))
    if not GAUDI3:
        s = 16 if lg2 >= 4 else 1 if lg2 >= 0 else 0.0625 if lg2 >= -4 else 0.00390625
    else:
        s = 2.0 ** lg2
    if limit is not None and GAUDI3:
        s = limit
    return torch.tensor([float(s)]).to("hpu"), torch.tensor([1.0 / s]).to("hpu")

torch.manual_seed(0)
for causal in (True, False):
    for recompute in (True, False):
        q, k, v = (torch.randn(3, 4, n, 8).to(torch.bfloat16) for n in (16, 32, 32))
        mask = None
        if not causal:
            m = torch.randint(0, 2, (32,)).float()
            mask = m.masked_fill(m == 0, -1e9).masked_fill(m == 1, 0.0)
            mask = mask.to(torch.bfloat16).expand(3, 1, 1, 32)
        with torch.autocast("cpu", torch.bfloat16):
            s = q @ k.transpose(-2, -1) / math.sqrt(8)
            if mask is not None:
                s = s + mask
            else:
                s = s.masked_fill(~torch.ones(16, 32, dtype=torch.bool).tril(), -1e9)
            P = F.softmax(s, -1)
            O = (P @ v).float()
        amax_ref = P.abs().max().float()
        with ht.sdp_kernel(enable_recompute=recompute):
            o, amax_s, _ = fp8_fused_sdpa(h(q), h(k), h(v), attn_mask=h(mask), is_causal=causal,
                                          softmax_mode="fast", is_amax_s=True)
        print("measure", causal, recompute, o.dtype,
              torch.allclose(o.cpu().float(), O, rtol=1e-3, atol=0.08),
              torch.allclose(amax_s.cpu(), amax_ref, rtol=1e-3, atol=0.05))
        (sq, dq), (sk, dk), (sv, dv) = scales(q), scales(k), scales(v)
        cast = lambda t, s: torch.ops.hpu.cast_to_fp8_v2(h(t), s, False, False,
                                                         torch.float8_e4m3fn)[0]
        ss, ds = scales(amax_ref, True, 128)
        so = scales(O)[0] if recompute else None  # the plain op gives no fp8 output
        with ht.sdp_kernel(enable_recompute=recompute):
            o8, _, _ = fp8_fused_sdpa(cast(q, sq), cast(k, sk), cast(v, sv), attn_mask=h(mask),
                                      is_causal=causal, d_scale_q=dq, d_scale_k=dk, d_scale_v=dv,
                                      q_scale_s=ss, q_scale_o=so, d_scale_s=ds)
        got = o8.cpu().float() / (so.cpu().item() if so is not None else 1.0)
        print("fp8", causal, recompute, o8.dtype,
              torch.allclose(got, O, rtol=1e-3, atol=0.4), (got - O).abs().max().item() > 0)
"""


@pytest.mark.parametrize("generation", ["gaudi2", "gaudi3"])
def test_fp8_fused_sdpa_meets_the_bridge_test(run, generation):
    lines = run(BRIDGE_CASES, {"HPU_PLUGIN_EMULATE": generation}).stdout.splitlines()
    measured = [line for line in lines if line.startswith("measure ")]
    fp8 = [line for line in lines if line.startswith("fp8 ")]
    assert measured == [f"measure {c} {r} torch.bfloat16 True True"
                        for c in (True, False) for r in (True, False)], lines
    assert fp8 == [f"fp8 {c} {r} {'torch.float8_e4m3fn' if r else 'torch.bfloat16'} True True"
                   for c in (True, False) for r in (True, False)], lines


OPS = r"""
import torch
from habana_frameworks.torch.hpex.kernels import fp8_fused_sdpa

h = lambda t: t.to("hpu")
torch.manual_seed(0)
q = torch.randn(2, 4, 8, 16)
k = torch.randn(2, 2, 8, 16)
v = torch.randn(2, 2, 8, 16)
one = torch.ones(1)
args = dict(is_causal=True, d_scale_q=h(one), d_scale_k=h(one), d_scale_v=h(one),
            q_scale_s=h(one * 8), d_scale_s=h(one / 8), q_scale_o=h(one * 2))
q8, k8, v8 = (h(t).to(torch.float8_e4m3fn) for t in (q, k, v))
run = lambda a, b, c: fp8_fused_sdpa(a, b, c, **args)[0]
eager = run(q8, k8, v8)
compiled = torch.compile(run, backend="hpu_backend")(q8, k8, v8)
print("gqa", list(eager.shape), eager.dtype,
      torch.equal(eager.cpu().float(), compiled.cpu().float()))
# the .scalar form: the same values as one-element tensors; 0.0 is an absent scale
tensors = torch.ops.hpu.fp8_sdpa_recomp_fwd(
    q8, k8.repeat_interleave(2, 1), v8.repeat_interleave(2, 1), None, 0.0, 0.25, True, False,
    "none", h(one), h(one), h(one), h(one * 8), h(one * 2), h(one / 8), True, True, None, "left")
scalars = torch.ops.hpu.fp8_sdpa_recomp_fwd.scalar(
    q8, k8.repeat_interleave(2, 1), v8.repeat_interleave(2, 1), None, 0.0, 0.25, True, False,
    "none", 1.0, 1.0, 1.0, 8.0, 2.0, 0.125, True, True, None, "left")
print("scalar equal", all(torch.equal(a.cpu().float(), b.cpu().float())
                          for a, b in zip(tensors, scalars)))
print("amax", tensors[4].cpu().tolist(), tensors[4].dtype,
      tensors[5].cpu().item() == (tensors[0].cpu().float() / 2).abs().max().item())
absent = torch.ops.hpu.fp8_sdpa_recomp_fwd.scalar(
    q8, k8.repeat_interleave(2, 1), v8.repeat_interleave(2, 1), None, 0.0, 0.25, True, False,
    "none", 1.0, 1.0, 1.0, 8.0, 0.0, 0.125, False, False, None, "left")
print("no output scale", absent[0].dtype)
for bad in (lambda: fp8_fused_sdpa(q8, k8, v8, dropout_p=0.1, is_causal=True),
            lambda: fp8_fused_sdpa(q8, k8, v8, d_scale_q=h(torch.ones(4)))):
    try:
        bad()
        print("accepted")
    except RuntimeError as exc:
        print("refused:", str(exc).splitlines()[0])
"""


def test_fp8_attention_ops_forms_and_refusals(run):
    """Grouped-query attention eager and compiled alike (the fake kernels' shapes and dtypes),
    the ``.scalar`` form equal to the tensor form, the amax outputs, bf16 out without an
    output scale, and the refusals of what is not modelled."""
    out = run(OPS, {"HPU_PLUGIN_EMULATE": "gaudi2"}).stdout
    assert "gqa [2, 4, 8, 16] torch.float8_e4m3fn True" in out, out
    assert "scalar equal True" in out, out
    assert "amax [1.0] torch.float32 True" in out, out
    assert "no output scale torch.bfloat16" in out, out
    assert "refused: fp8_sdpa_recomp_fwd: dropout p=0.1 is not emulated" in out, out
    assert "refused: fp8_sdpa_recomp_fwd: d_scale_q must hold one value" in out, out


GAUDI1 = r"""
import torch
from habana_frameworks.torch.hpex.kernels import fp8_fused_sdpa
q = torch.randn(1, 2, 4, 8).to(torch.bfloat16).to("hpu")
print("bf16 measure", fp8_fused_sdpa(q, q, q, is_causal=True, is_amax_s=True)[1].cpu().tolist())
try:
    fp8_fused_sdpa(q.to(torch.float8_e4m3fn), q.to(torch.float8_e4m3fn),
                   q.to(torch.float8_e4m3fn), is_causal=True)
except RuntimeError as exc:
    print("refused:", str(exc).splitlines()[0])
"""


def test_fp8_attention_is_refused_on_first_generation_gaudi(run):
    out = run(GAUDI1, {"HPU_PLUGIN_EMULATE": "gaudi"}).stdout
    assert "bf16 measure [1.0]" in out, out
    assert ("refused: fp8_sdpa_recomp_fwd: fp8 is not supported on GAUDI; fp8 needs Gaudi2 or "
            "later") in out, out


MOE = r"""
import torch
import torch.nn.functional as F
hpu = torch.ops.hpu
print("has", hasattr(hpu.mixture_of_experts, "fp8_measurement"),
      hasattr(hpu.mixture_of_experts, "fp8_measurement_fused_weights"))
if hasattr(hpu.mixture_of_experts, "fp8_measurement"):
    torch.manual_seed(0)
    x = torch.randn(6, 16)
    table = torch.tensor([[0, 1], [1, 2], [2, 0], [0, 2], [1, 0], [2, 1]])
    weights = torch.rand(6, 2)
    w1 = [torch.randn(16, 8) for _ in range(3)]
    w2 = [torch.randn(16, 8) for _ in range(3)]
    w3 = [torch.randn(8, 16) for _ in range(3)]
    d = lambda ws: [w.to("hpu") for w in ws]
    out, amax = hpu.mixture_of_experts.fp8_measurement(
        x.to("hpu"), table.to("hpu"), weights.to("hpu"), d(w1), d(w2), d(w3), False, "silu",
        0, 2, True)
    plain = hpu.mixture_of_experts(x.to("hpu"), table.to("hpu"), weights.to("hpu"), d(w1),
                                   d(w2), d(w3), False, "silu", 0, 2)
    ref = torch.stack([(F.silu(x @ a) * (x @ b)).amax() for a, b in zip(w1, w2)])
    fused, fused_amax = hpu.mixture_of_experts.fp8_measurement_fused_weights(
        x.to("hpu"), table.to("hpu"), weights.to("hpu"),
        [torch.cat([a, b], 1).to("hpu") for a, b in zip(w1, w2)], d(w3), False, "silu", 0, 2,
        True)
    print("output", torch.equal(out.cpu(), plain.cpu()), torch.equal(fused.cpu(), plain.cpu()))
    print("amax", amax.device.type, amax.dtype, torch.allclose(amax, ref, rtol=1e-6),
          torch.equal(fused_amax, amax))
"""


def test_moe_measurement_ops_exist_in_eager_mode_only_as_in_the_bridge(run):
    """``mixture_of_experts.fp8_measurement*`` (the bridge v1.19.0's eager library only): the
    block's output and each expert's intermediate maximum, on the CPU as the reference."""
    eager = run(MOE, {"HPU_PLUGIN_EMULATE": "gaudi2", "PT_HPU_LAZY_MODE": "0"}).stdout
    assert "has True True" in eager, eager
    assert "output True True" in eager, eager
    assert "amax cpu torch.float32 True True" in eager, eager
    lazy = run(MOE, {"HPU_PLUGIN_EMULATE": "gaudi2", "PT_HPU_LAZY_MODE": "1"}).stdout
    assert "has False False" in lazy, lazy
