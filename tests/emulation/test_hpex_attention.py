"""``hpex.kernels.FusedSDPA`` on the emulated device, called as Gaudi code calls it, against
torch's unfused ``scaled_dot_product_attention`` (forward and backward) on the CPU.

One user script runs every case and prints the largest deviation per case; the tolerances
are stated here, relative to the largest magnitude of each result (at least 1): float32
results agree to 2e-5, bfloat16 to 2e-2 (bf16 has 8 bits of mantissa; the emulated kernel
computes in float32 and rounds once, the reference rounds at every step).
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.e2e

TOLERANCE = {"float32": 2e-5, "bfloat16": 2e-2}

CASES = r"""
import json
import torch
import torch.nn.functional as F
from habana_frameworks.torch.hpex.kernels import FusedSDPA

torch.manual_seed(0)
results = {}

def grads_of(out, inputs, dout):
    return torch.autograd.grad(out, inputs, dout)

def compare(name, q, k, v, fused_args, ref_kwargs, train=True):
    leaves = [t.detach().requires_grad_(train) for t in (q, k, v)]
    dev = [t.detach().to("hpu").requires_grad_(train) for t in (q, k, v)]
    out = FusedSDPA.apply(*dev, *fused_args)
    ref = F.scaled_dot_product_attention(*leaves, **ref_kwargs)
    size = max(1.0, ref.detach().abs().max().item())
    err = (out.float().cpu() - ref.float()).abs().max().item() / size
    if train:
        dout = torch.randn_like(ref)
        got = grads_of(out, dev, dout.to("hpu"))
        want = grads_of(ref, leaves, dout)
        err = max([err] + [(a.float().cpu() - b.float()).abs().max().item()
                           / max(1.0, b.abs().max().item()) for a, b in zip(got, want)])
    results[name] = [str(q.dtype).split(".")[1], err]

for dtype in (torch.float32, torch.bfloat16):
    d = str(dtype).split(".")[1]
    q, k, v = (torch.randn(2, 4, 16, 32, dtype=dtype) for _ in range(3))
    for recompute in (True, False):
        r = f"{d}-recompute={recompute}"
        compare(f"plain {r}", q, k, v, (None, 0.0, False, None, "None", recompute), {})
        compare(f"causal {r}", q, k, v, (None, 0.0, True, None, "None", recompute),
                {"is_causal": True})
        compare(f"scale {r}", q, k, v, (None, 0.0, False, 0.3, "None", recompute),
                {"scale": 0.3})
        mask = torch.randn(2, 1, 16, 16).to(dtype)
        compare(f"float mask {r}", q, k, v, (mask.to("hpu"), 0.0, False, None, "None", recompute),
                {"attn_mask": mask})
        keep = torch.rand(2, 4, 16, 16) > 0.3
        keep[..., 0] = True
        compare(f"bool mask {r}", q, k, v, (keep.to("hpu"), 0.0, False, None, "None", recompute),
                {"attn_mask": keep})
        kv = [torch.randn(2, 2, 16, 32, dtype=dtype) for _ in range(2)]
        compare(f"gqa causal {r}", q, *kv, (None, 0.0, True, None, "None", recompute),
                {"is_causal": True, "enable_gqa": True})
        gmask = torch.randn(2, 4, 16, 16).to(dtype)
        compare(f"gqa head mask {r}", q, *kv, (gmask.to("hpu"), 0.0, False, None, "None",
                                                 recompute),
                {"attn_mask": gmask, "enable_gqa": True})
        if recompute:  # inference: the output alone, without the probabilities
            compare(f"inference float mask {d}", q, k, v, (mask.to("hpu"), 0.0, False),
                    {"attn_mask": mask}, train=False)
            compare(f"inference bool mask {d}", q, k, v, (keep.to("hpu"), 0.0, False),
                    {"attn_mask": keep}, train=False)
            compare(f"inference gqa head mask {d}", q, *kv, (gmask.to("hpu"), 0.0, False),
                    {"attn_mask": gmask, "enable_gqa": True}, train=False)
        mq = [torch.randn(2, 1, 16, 32, dtype=dtype) for _ in range(2)]
        compare(f"mqa {r}", q, *mq, (None, 0.0, False, None, "None", recompute),
                {"enable_gqa": True})
        cross = [torch.randn(2, 4, 24, 32, dtype=dtype) for _ in range(2)]
        compare(f"cross-length {r}", q, *cross, (None, 0.0, False, None, "None", recompute), {})
    compare(f"fast softmax causal training {d}", q, k, v, (None, 0.0, True, None, "fast", True),
            {"is_causal": True})
    compare(f"default recompute (None) {d}", q, k, v, (None, 0.0, True), {"is_causal": True})
    compare(f"inference {d}", q, k, v, (None, 0.0, True), {"is_causal": True}, train=False)

# valid sequence lengths (inference, causal): padding keys are masked out
q, k, v = (torch.randn(3, 2, 8, 16) for _ in range(3))
lengths = torch.tensor([8, 5, 3])
for side in ("left", "right"):
    pos = torch.arange(8)
    if side == "left":
        valid = pos.view(1, -1) >= (8 - lengths).view(-1, 1)
    else:
        valid = pos.view(1, -1) < lengths.view(-1, 1)
    keep = torch.ones(8, 8, dtype=torch.bool).tril() & valid.view(3, 1, 1, 8)
    rows = keep.any(-1)  # query rows that see at least one key
    with torch.no_grad():
        for recompute in (True, False):
            out = FusedSDPA.apply(q.to("hpu"), k.to("hpu"), v.to("hpu"), None, 0.0, True, None,
                                  "None", recompute, lengths.to("hpu"), side).cpu()
            ref = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
            ref = torch.where(rows.unsqueeze(-1), ref, torch.zeros_like(ref))
            results[f"valid_seq_len {side} recompute={recompute}"] = [
                "float32", (out - ref).abs().max().item()]

# attention probabilities and dropout mask (inference, no recompute)
with torch.no_grad():
    out, probs, dm = FusedSDPA.apply(q.to("hpu"), k.to("hpu"), v.to("hpu"), None, 0.25, False,
                                     None, "None", False, None, "left", True, True)
    want_p = torch.softmax(q @ k.transpose(-2, -1) / 4.0, dim=-1)
    dropped = want_p * dm.cpu().float() / 0.75
    results["attn probs"] = ["float32", (probs.cpu() - want_p).abs().max().item()]
    results["dropout output from its mask"] = ["float32",
                                               (out.cpu() - dropped @ v).abs().max().item()]
    kept = dm.float().mean().item()
    results["dropout keeps 1-p"] = ["float32", abs(kept - 0.75) if abs(kept - 0.75) > 0.05 else 0.0]

# dropout in training with recompute: with v = I, the output is the dropped P itself, so the
# mask is readable and the backward must match autograd through that same mask
qd, kd = torch.randn(2, 2, 16, 8), torch.randn(2, 2, 16, 8)
vd = torch.eye(16).expand(2, 2, 16, 16).contiguous()
dev = [t.to("hpu").requires_grad_() for t in (qd, kd, vd)]
torch.manual_seed(3)
out = FusedSDPA.apply(*dev, None, 0.5, False, None, "None", True)
mask = (out.detach().cpu() != 0).float()
leaves = [t.clone().requires_grad_() for t in (qd, kd, vd)]
probs = torch.softmax(leaves[0] @ leaves[1].transpose(-2, -1) / 8 ** 0.5, -1)
ref = (probs * mask / 0.5) @ leaves[2]
dout = torch.randn(2, 2, 16, 16)
got = torch.autograd.grad(out, dev, dout.to("hpu"))
want = torch.autograd.grad(ref, leaves, dout)
results["recompute dropout backward"] = ["float32", max(
    [(out.detach().cpu() - ref.detach()).abs().max().item()]
    + [(a.cpu() - b).abs().max().item() for a, b in zip(got, want)])]

# traced by torch.compile (hpu_backend) through the ops' fake kernels: attention, then the
# rotary embedding and RMSNorm of the same model code
from habana_frameworks.torch.hpex.kernels import RotaryPosEmbeddingHelperV2
from habana_frameworks.torch.hpex.normalization import FusedRMSNorm

def block(q, k, v, cos, sin, pos, w):
    out = FusedSDPA.apply(q, k, v, None, 0.0, True, None, "None", False)
    return FusedRMSNorm.apply(RotaryPosEmbeddingHelperV2.apply(out, cos, sin, pos), w, 1e-6)

def block_ref(q, k, v, cos, sin, pos, w):
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    c, s = cos[0, 0][pos].unsqueeze(1), sin[0, 0][pos].unsqueeze(1)
    half = out.shape[-1] // 2
    out = out * c + torch.cat((-out[..., half:], out[..., :half]), -1) * s
    return out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + 1e-6) * w

compiled = torch.compile(block, backend="hpu_backend")
q, k, v = (torch.randn(1, 2, 8, 16) for _ in range(3))
angles = torch.outer(torch.arange(8.0), torch.linspace(0.1, 1.0, 8)).repeat(1, 2)
args = (q, k, v, angles.cos()[None, None], angles.sin()[None, None],
        torch.arange(8).unsqueeze(0), torch.randn(16))
out = compiled(*(t.to("hpu") for t in args)).cpu()
results["torch.compile"] = ["float32", (out - block_ref(*args)).abs().max().item()]
print("RESULTS " + json.dumps(results))
"""

REFUSALS = r"""
import torch
from habana_frameworks.torch.hpex.kernels import FusedSDPA

q, k, v = (torch.randn(1, 2, 4, 8, device="hpu", requires_grad=True) for _ in range(3))
lengths = torch.tensor([4], device="hpu")
attempts = {
    "probs in training": lambda: FusedSDPA.apply(q, k, v, None, 0.0, False, None, "None",
                                                 False, None, "left", False, True),
    "fast softmax non-causal training": lambda: FusedSDPA.apply(q, k, v, None, 0.0, False, None,
                                                                "fast", True),
    "valid_seq_len in training": lambda: FusedSDPA.apply(q, k, v, None, 0.0, True, None, "None",
                                                         False, lengths),
    "dropout mask with recompute": lambda: FusedSDPA.apply(q, k, v, None, 0.1, False, None,
                                                           "None", True, None, "left", True),
    "cpu tensors": lambda: torch.ops.hpu.sdpa_fwd(q.detach().cpu(), k.detach().cpu(),
                                                  v.detach().cpu(), None, 0.0, 0.3, False,
                                                  "None", None, "left"),
}
def no_padding_side():  # optimum-habana's call: a mask, the side "None"
    mask = torch.zeros(1, 1, 4, 4, device="hpu")
    out = FusedSDPA.apply(q.detach(), k.detach(), v.detach(), mask, 0.0, False, None, "None",
                          False, None, "None")
    want = torch.nn.functional.scaled_dot_product_attention(q.detach(), k.detach(), v.detach(),
                                                            attn_mask=mask)
    assert torch.allclose(out, want, atol=1e-5), (out - want).abs().max()
attempts["padding side None"] = no_padding_side
def mask_without_recompute():
    with torch.hpu.sdp_kernel(enable_recompute=False):
        return FusedSDPA.apply(q.detach(), k.detach(), v.detach(), None, 0.1, False, None,
                               "None", None, None, "left", True)
attempts["dropout mask, recompute by default"] = lambda: FusedSDPA.apply(
    q.detach(), k.detach(), v.detach(), None, 0.1, False, None, "None", None, None, "left", True)
attempts["dropout mask in sdp_kernel(enable_recompute=False)"] = mask_without_recompute
for name, attempt in attempts.items():
    try:
        attempt()
    except (AssertionError, RuntimeError, NotImplementedError) as exc:
        print(f"REFUSED {name}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    else:
        print(f"ACCEPTED {name}")
"""


@pytest.fixture(scope="module")
def results(emulator_built: None) -> dict[str, list]:
    from conftest import run_script

    out = run_script(CASES).stdout
    line = next(x for x in out.splitlines() if x.startswith("RESULTS "))
    return json.loads(line[len("RESULTS "):])


def test_every_case_ran(results):
    assert len(results) == 57, sorted(results)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_forward_and_backward_match_torch_sdpa(results, dtype):
    off = {name: err for name, (d, err) in results.items()
           if d == dtype and not err <= TOLERANCE[dtype]}
    assert off == {}, f"beyond {TOLERANCE[dtype]}: {off}"


def test_what_the_bridge_refuses_is_refused_with_its_message(run):
    lines = {line.split(":")[0]: line for line in run(REFUSALS).stdout.splitlines()
             if line.startswith(("REFUSED", "ACCEPTED"))}
    assert lines["REFUSED probs in training"].endswith(
        "AssertionError: return_attn_probs is supported only for inference mode")
    assert lines["REFUSED fast softmax non-causal training"].endswith(
        "Optimized softmax mode is supported in recompute training mode only in "
        "causal(triangular) mask case")
    assert lines["REFUSED valid_seq_len in training"].endswith(
        "Valid sequence length is supported only in inference with is_causal(triangular) mask "
        "case")
    assert lines["REFUSED dropout mask with recompute"].endswith(
        "Return_dropout_mask is not supported in recompute mode")
    # torch.hpu.recompute_sdp_enabled() (on by default) decides when recompute_mode is None
    assert lines["REFUSED dropout mask, recompute by default"].endswith(
        "Return_dropout_mask is not supported in recompute mode")
    assert "ACCEPTED dropout mask in sdp_kernel(enable_recompute=False)" in lines
    assert "hpu::sdpa_fwd" in lines["REFUSED cpu tensors"]
    assert "'CPU' backend" in lines["REFUSED cpu tensors"]
    # the bridge's kernel sets a padding flag only for "left" and "right": any other side
    # (optimum-habana's "None") runs, masking nothing by length
    assert "ACCEPTED padding side None" in lines


GENERATOR = r"""
import torch
from habana_frameworks.torch.hpex.kernels import FusedSDPA

q, k, v = (torch.randn(1, 2, 8, 16, device="hpu") for _ in range(3))
for p in (0.0, 0.1):
    for recompute in (True, False):
        torch.manual_seed(7)
        expected = torch.rand(4, device="hpu")
        torch.manual_seed(7)
        FusedSDPA.apply(q, k, v, None, p, True, None, "None", recompute)
        drawn = not torch.equal(torch.rand(4, device="hpu"), expected)
        print(f"p={p} recompute={recompute} draws={drawn}")
"""


def test_without_dropout_the_kernel_draws_no_random_numbers(run):
    """As the bridge's sdpa_recomp_fwd: a dropout seed is taken from the device generator only
    when p > 0, so generate() with do_sample and a seed gives the unfused path's tokens."""
    lines = [line for line in run(GENERATOR).stdout.splitlines() if line.startswith("p=")]
    assert lines == [
        "p=0.0 recompute=True draws=False", "p=0.0 recompute=False draws=False",
        "p=0.1 recompute=True draws=True", "p=0.1 recompute=False draws=True",
    ]
