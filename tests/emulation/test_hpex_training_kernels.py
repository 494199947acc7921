"""``hpex`` normalizations, rotary embeddings, fused optimizers and the ``torch.ops.hpu``
ops that DeepSpeed and optimum-habana call, on the emulated device, each against an unfused
reference on the CPU: a plain RMSNorm, Transformers' ``rotate_half`` rotary formula,
``torch.nn.utils.clip_grad_norm_``, ``torch.optim.AdamW``/``SGD``, a per-expert MoE loop,
``torch.nn.functional.ctc_loss``.

Tolerances (largest deviation relative to the largest magnitude, at least 1): 2e-5 for
float32 kernels; 2e-2 for bfloat16; optimizers after 20 steps 1e-4. The fused AdamW step
folds the bias correction into the step size, so its eps acts as torch's eps divided by
sqrt(1 - beta2^t) (31x at step 1): the comparisons use eps=1e-12, where that is far below
the gradients; with eps=1e-8 the tiniest gradients of this model move up to 6e-4 apart.
Moments kept in float8 (``moments_dtype``) hold 2-3 mantissa bits: 5e-2 after 20 steps.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.e2e

TOLERANCE = {"float32": 2e-5, "bfloat16": 2e-2, "optimizer": 1e-4, "fp8 moments": 5e-2}

CASES = r"""
import json
import torch
import torch.nn.functional as F
from habana_frameworks.torch.hpex.kernels import (
    CTCLoss, RotaryPosEmbeddingHelperV1, RotaryPosEmbeddingHelperV2, RotaryPosEmbeddingHelperV3,
    RotaryPosEmbeddingMode, apply_rotary_pos_emb)
from habana_frameworks.torch.hpex.normalization import FusedClipNorm, FusedRMSNorm
from habana_frameworks.torch.hpex.optimizers import FusedAdamW, FusedSGD

torch.manual_seed(0)
results = {}

def rel(a, b):
    return (a.detach().float().cpu() - b.detach().float()).abs().max().item() / max(
        1.0, b.detach().abs().max().item())

def record(name, kind, errors):
    results[name] = [kind, max(errors)]

def both(fused, reference, inputs, kind, name):
    # forward and backward of fused (on hpu) against reference (on cpu)
    leaves = [t.clone().requires_grad_(t.is_floating_point()) for t in inputs]
    dev = [t.to("hpu").requires_grad_(t.is_floating_point()) for t in inputs]
    out, ref = fused(*dev), reference(*leaves)
    dout = torch.randn_like(ref)
    grads = [t for t in dev if t.requires_grad]
    got = torch.autograd.grad(out, grads, dout.to("hpu"))
    want = torch.autograd.grad(ref, [t for t in leaves if t.requires_grad], dout)
    record(name, kind, [rel(out, ref)] + [rel(a, b) for a, b in zip(got, want)])

def rms_ref(x, w, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)

for dtype in (torch.float32, torch.bfloat16):
    d = str(dtype).split(".")[1]
    x, w = torch.randn(2, 5, 64, dtype=dtype), torch.randn(64, dtype=dtype)
    both(lambda x, w: FusedRMSNorm.apply(x, w, 1e-6), rms_ref, [x, w], d, f"rmsnorm {d}")
both(lambda x, w: FusedRMSNorm.apply(x, w, 1e-6, True, 0, True), rms_ref,
     [torch.randn(3, 32), torch.randn(32)], "float32", "rmsnorm fast_math")

def rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)

def rotate_every_two(x):
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)

B, H, L, D, P = 2, 3, 6, 16, 10
inv = 1.0 / 10000 ** (torch.arange(0, D, 2).float() / D)
freqs = torch.outer(torch.arange(P).float(), inv)
emb = torch.cat((freqs, freqs), dim=-1)
cos, sin = emb.cos(), emb.sin()
position_ids = torch.tensor([[0, 1, 2, 3, 4, 5], [4, 5, 6, 7, 8, 9]])
q = torch.randn(B, H, L, D)
# V2 as optimum-habana calls it: tables [1, 1, P, D], position ids [B, L]
both(lambda q: RotaryPosEmbeddingHelperV2.apply(q, cos[None, None].to("hpu"),
                                               sin[None, None].to("hpu"), position_ids.to("hpu")),
     lambda q: q * cos[position_ids].unsqueeze(1) + rotate_half(q) * sin[position_ids].unsqueeze(1),
     [q], "float32", "rope V2 position ids")
# V1 with an offset, as the bridge's own test builds it: the tables carry `offset` leading
# columns on their last dim, and the kernel reads cos[..., offset:offset + D]
lead = torch.rand(L, 3)
ocos, osin = (torch.cat((lead, t[:L]), dim=-1) for t in (cos, sin))
both(lambda q: RotaryPosEmbeddingHelperV1.apply(q, ocos[None, None].to("hpu"),
                                               osin[None, None].to("hpu"), 3),
     lambda q: q * ocos[..., 3:3 + D] + rotate_half(q) * osin[..., 3:3 + D], [q], "float32",
     "rope V1 offset")
qb = q.to(torch.bfloat16)
both(lambda q: RotaryPosEmbeddingHelperV2.apply(q, cos[None, None].to("hpu"),
                                               sin[None, None].to("hpu"), position_ids.to("hpu")),
     lambda q: (q.float() * cos[position_ids].unsqueeze(1) + rotate_half(q.float())
                * sin[position_ids].unsqueeze(1)),
     [qb], "bfloat16", "rope V2 bf16 input, fp32 tables (computed in fp32)")
gcos, gsin = (torch.repeat_interleave(t[:L, : D // 2], 2, dim=-1) for t in (cos, sin))
gj = torch.randn(B, L, H, D)
with torch.no_grad():
    got = apply_rotary_pos_emb(gj.to("hpu"), gcos[None, :, None].to("hpu"),
                               gsin[None, :, None].to("hpu"), None, 0,
                               RotaryPosEmbeddingMode.PAIRWISE)
record("rope pairwise (GPT-J)", "float32",
       [rel(got, gj * gcos[None, :, None] + rotate_every_two(gj) * gsin[None, :, None])])
cache = torch.stack((freqs[:L, :4].cos(), freqs[:L, :4].sin()), dim=-1).unsqueeze(1)  # [L,1,4,2]
glm = torch.randn(L, B, H, D)
def glm_ref(p):
    c = torch.repeat_interleave(cache[..., 0], 2, -1).unsqueeze(2)
    s = torch.repeat_interleave(cache[..., 1], 2, -1).unsqueeze(2)
    r = p[..., :8]
    return torch.cat((r * c + rotate_every_two(r) * s, p[..., 8:]), dim=-1)
both(lambda p: RotaryPosEmbeddingHelperV3.apply(p, cache.to("hpu")), glm_ref, [glm], "float32",
     "rope V3 rope_cache (ChatGLM)")

# CTCLoss as optimum-habana's wav2vec2 calls it on Gaudi2, against F.ctc_loss
T, N, C, S = 20, 3, 6, 5
log_probs = torch.randn(T, N, C).log_softmax(-1)
targets = torch.randint(1, C, (N, S))
lengths = (torch.tensor([20, 18, 15]), torch.tensor([5, 3, 4]))
for reduction in ("mean", "sum", "none"):
    both(lambda lp, t, il, tl: CTCLoss.apply(lp, t, il, tl, 0, reduction, True),
         lambda lp, t, il, tl: F.ctc_loss(lp, t, il, tl, reduction=reduction, zero_infinity=True),
         [log_probs, targets, *lengths], "float32", f"CTCLoss {reduction}")
# unbatched, as the bridge's test_hpu_target_unpadded_unbatched_ctc_loss: one sample, (T, C)
# log-probabilities, (S,) targets, 0-dim lengths; its unreduced loss is the bridge's (1,)
one = [torch.randn(T, C).log_softmax(-1), torch.randint(1, C, (4,)), torch.tensor(T),
       torch.tensor(4)]
for reduction in ("mean", "sum", "none"):
    both(lambda lp, t, il, tl: CTCLoss.apply(lp, t, il, tl, 0, reduction).sum(),
         lambda lp, t, il, tl: F.ctc_loss(lp, t, il, tl, reduction=reduction).sum(),
         one, "float32", f"CTCLoss unbatched {reduction}")
assert CTCLoss.apply(*(t.to("hpu") for t in one), 0, "none").shape == (1,)

def model_and_data(device, seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    return model.to(device)

def train(device, make_opt, clip=None, steps=20):
    model = model_and_data(device)
    opt = make_opt(model.parameters())
    clipper = FusedClipNorm(model.parameters(), clip) if clip and device == "hpu" else None
    data = torch.Generator().manual_seed(1)
    norms = []
    for _ in range(steps):
        x = torch.randn(4, 8, generator=data).to(device)
        model(x).pow(2).mean().backward()
        if clip:
            norm = (clipper.clip_norm(model.parameters()) if clipper
                    else torch.nn.utils.clip_grad_norm_(model.parameters(), clip))
            norms.append(float(norm.reshape(-1)[0]))
        opt.step()
        opt.zero_grad()
    return [p.detach().cpu() for p in model.parameters()], norms

def compare_training(name, fused, reference, clip=None):
    got, got_norms = train("hpu", fused, clip)
    want, want_norms = train("cpu", reference, clip)
    errors = [rel(a, b) for a, b in zip(got, want)]
    errors += [abs(a - b) / max(1.0, abs(b)) for a, b in zip(got_norms, want_norms)]
    record(name, "optimizer", errors)

compare_training("FusedAdamW weight decay",
                 lambda p: FusedAdamW(p, lr=1e-2, eps=1e-12, weight_decay=0.1),
                 lambda p: torch.optim.AdamW(p, lr=1e-2, eps=1e-12, weight_decay=0.1))
compare_training("FusedAdamW + FusedClipNorm",
                 lambda p: FusedAdamW(p, lr=1e-2, eps=1e-12),
                 lambda p: torch.optim.AdamW(p, lr=1e-2, eps=1e-12, weight_decay=0.0), clip=0.5)
for moments in (torch.float8_e4m3fn, (torch.bfloat16, torch.float8_e5m2)):
    got, _ = train("hpu", lambda p: FusedAdamW(p, lr=1e-2, eps=1e-12, moments_dtype=moments))
    want, _ = train("cpu", lambda p: torch.optim.AdamW(p, lr=1e-2, eps=1e-12, weight_decay=0.0))
    record(f"FusedAdamW moments {moments}", "fp8 moments",
           [rel(a, b) for a, b in zip(got, want)])
compare_training("FusedSGD", lambda p: FusedSGD(p, lr=1e-2, weight_decay=0.01),
                 lambda p: torch.optim.SGD(p, lr=1e-2, weight_decay=0.01))
compare_training("FusedSGD momentum nesterov",
                 lambda p: FusedSGD(p, lr=1e-2, momentum=0.9, nesterov=True),
                 lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9, nesterov=True))

# torch.ops.hpu.optimizer_adamw exactly as DeepSpeed 0.19.8's HPU FusedAdam calls it (eager)
import math
w = torch.randn(5, 3); g = torch.randn(5, 3)
ref_p = w.clone().requires_grad_(); ref_p.grad = g.clone()
ref_opt = torch.optim.AdamW([ref_p], lr=1e-3, eps=1e-8, weight_decay=0.01)
ref_opt.step()
wd = w.to("hpu"); m = torch.zeros_like(wd); v = torch.zeros_like(wd)
lr, b1, b2 = 1e-3, 0.9, 0.999
step_size = lr * math.sqrt(1 - b2) / (1 - b1)
neg_step_t = torch.tensor([-step_size]).to(wd.device)
modified_wd = 1.0 - 0.01 * lr
torch.ops.hpu.optimizer_adamw([g.to("hpu")], [wd], [m], [v], neg_step_t, b1, b2, 1e-8,
                              torch.tensor([modified_wd]).to(wd.device), modified_wd != 1.0)
record("optimizer_adamw as DeepSpeed calls it", "optimizer", [rel(wd, ref_p)])

# mixture_of_experts as optimum-habana's Mixtral calls it (nn.Linear weights, permuted)
T, Hd, I, E, K = 6, 8, 12, 4, 2
hidden = torch.randn(T, Hd)
gate = [torch.randn(I, Hd) for _ in range(E)]
up = [torch.randn(I, Hd) for _ in range(E)]
down = [torch.randn(Hd, I) for _ in range(E)]
logits = torch.randn(T, E)
weights, table = torch.topk(torch.softmax(logits, -1), K)
ref = torch.zeros(T, Hd)
for t in range(T):
    for j in range(K):
        e = int(table[t, j])
        ref[t] += weights[t, j] * (F.linear(F.silu(F.linear(hidden[t], gate[e]))
                                            * F.linear(hidden[t], up[e]), down[e]))
to = lambda ts: [t.to("hpu") for t in ts]
got = torch.ops.hpu.mixture_of_experts(
    hidden_states=hidden.to("hpu"), expert_routing_table=table.to("hpu"),
    router_weights=weights.to("hpu"), w1=to(gate), w2=to(up), w3=to(down),
    permuted_weights=True, activation="silu", experts_min=0, experts_max=E - 1)
fused = torch.ops.hpu.mixture_of_experts.fused_weights(
    hidden.to("hpu"), table.to("hpu"), weights.to("hpu"),
    to([torch.cat((a, b), 0) for a, b in zip(gate, up)]), to(down), True, "silu", 0, E - 1)
record("mixture_of_experts (Mixtral)", "float32", [rel(got, ref), rel(fused, ref)])
# in slices of experts, as optimum-habana's DeepSeek-V2 and its expert parallelism call it:
# the lists hold experts experts_min..experts_max, the table global numbers
sliced = sum(torch.ops.hpu.mixture_of_experts(
    hidden_states=hidden.to("hpu"), expert_routing_table=table.to("hpu"),
    router_weights=weights.to("hpu"), w1=to(gate[lo:lo + 2]), w2=to(up[lo:lo + 2]),
    w3=to(down[lo:lo + 2]), permuted_weights=True, activation="silu", experts_min=lo,
    experts_max=lo + 1) for lo in (0, 2))
record("mixture_of_experts in slices of experts", "float32", [rel(sliced, ref)])
print("RESULTS " + json.dumps(results))
"""


@pytest.fixture(scope="module")
def results(emulator_built: None) -> dict[str, list]:
    from conftest import run_script

    out = run_script(CASES).stdout
    line = next(x for x in out.splitlines() if x.startswith("RESULTS "))
    return json.loads(line[len("RESULTS "):])


def test_every_case_ran(results):
    assert len(results) == 23, sorted(results)


@pytest.mark.parametrize("kind", ["float32", "bfloat16", "optimizer", "fp8 moments"])
def test_fused_kernels_match_their_unfused_reference(results, kind):
    off = {name: err for name, (k, err) in results.items()
           if k == kind and not err <= TOLERANCE[kind]}
    assert off == {}, f"beyond {TOLERANCE[kind]}: {off}"


LAZY = r"""
import math
import torch
from habana_frameworks.torch.hpex.normalization import FusedClipNorm
from habana_frameworks.torch.hpex.optimizers import FusedAdamW, FusedSGD
from habana_frameworks.torch.utils.internal import is_lazy

print("lazy", is_lazy())
def train(device, make_opt, clip):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                torch.nn.Linear(16, 4)).to(device)
    opt = make_opt(model.parameters())
    clipper = FusedClipNorm(model.parameters(), clip) if device == "hpu" else None
    data = torch.Generator().manual_seed(1)
    for _ in range(10):
        model(torch.randn(4, 8, generator=data).to(device)).pow(2).mean().backward()
        if clipper:
            clipper.clip_norm(model.parameters())
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad()
    return [p.detach().cpu() for p in model.parameters()]

def worst(a, b):
    return max(((x - y).abs().max() / y.abs().max().clamp_min(1)).item() for x, y in zip(a, b))

fused = train("hpu", lambda p: FusedAdamW(p, lr=1e-2, eps=1e-12, weight_decay=0.1), 0.1)
plain = train("cpu", lambda p: torch.optim.AdamW(p, lr=1e-2, eps=1e-12, weight_decay=0.1), 0.1)
print("adamw", worst(fused, plain))
print("sgd", worst(train("hpu", lambda p: FusedSGD(p, lr=1e-2, momentum=0.9), 0.1),
                   train("cpu", lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9), 0.1)))
# DeepSpeed 0.19.8's HPU FusedAdam in lazy mode: weight decay as a float factor, 9 arguments
w, g = torch.randn(5, 3), torch.randn(5, 3)
ref = w.clone().requires_grad_()
ref.grad = g.clone()
torch.optim.AdamW([ref], lr=1e-3, eps=1e-12, weight_decay=0.01).step()
wd, m, v = w.to("hpu"), torch.zeros(5, 3, device="hpu"), torch.zeros(5, 3, device="hpu")
neg_step_t = torch.tensor([-1e-3 * math.sqrt(1 - 0.999) / (1 - 0.9)]).to("hpu")
torch.ops.hpu.optimizer_adamw([g.to("hpu")], [wd], [m], [v], neg_step_t, 0.9, 0.999, 1e-12,
                              1.0 - 0.01 * 1e-3)
print("deepspeed", worst([wd.cpu()], [ref.detach()]))
"""


def test_fused_optimizers_and_clip_norm_take_the_lazy_mode_calls(run):
    lines = run(LAZY, {"PT_HPU_LAZY_MODE": "1"}).stdout.splitlines()
    assert "lazy True" in lines
    errors = {line.split()[0]: float(line.split()[1]) for line in lines
              if line.split()[0] in ("adamw", "sgd", "deepspeed")}
    assert set(errors) == {"adamw", "sgd", "deepspeed"}
    off = {name: err for name, err in errors.items() if not err <= TOLERANCE["optimizer"]}
    assert off == {}, off
