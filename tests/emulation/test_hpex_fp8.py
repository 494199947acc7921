"""fp8 on the emulated Gaudi: the bridge's float8 casts and GEMM, and the Transformer Engine
stand-in (``hpex.experimental.transformer_engine``, ``intel_transformer_engine``) as a user
and Accelerate's ``mixed_precision="fp8"`` train with it, against a CPU reference built from
torch's float8 dtypes; refused on first-generation Gaudi as the Gaudi Transformer Engine
refuses.

The reference applies the recipe by hand, rounding to nearest (``PT_TE_FORCE_SR_BWD=0`` turns
off the stochastic rounding of HYBRID backward casts, checked separately): first step scale
1, then ``2 ** floor(log2(fp8_max / amax))`` from the amax history; E4M3 saturates at 240 on
Gaudi2 and 448 on Gaudi3. Outputs and gradients agree with it to 1e-5 (both accumulate the
dequantized fp8 values in float32); against a float32 ``nn.Linear`` the fp8 layer is within
8% (E4M3 keeps 3 mantissa bits).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e

TRAIN = r"""
import math
import os
import torch
import torch.nn.functional as F
import habana_frameworks.torch.hpex.experimental.transformer_engine as te
from habana_frameworks.torch.hpex.experimental.transformer_engine.recipe import (
    DelayedScaling, Format)

print("available", te.fp8.is_fp8_available())
E4M3_MAX = 240.0 if torch.hpu.get_device_name() == "GAUDI2" else 448.0

def q(t, scale, dtype, bound):
    return (t * scale).clamp(-bound, bound).to(dtype).float() / scale

def pow2_scale(amax, fp8_max):
    return 2.0 ** math.floor(math.log2(fp8_max / amax))

torch.manual_seed(0)
layer = te.Linear(16, 8, bias=True)
with torch.no_grad():
    layer.bias.uniform_(-1, 1)
weight = layer.weight.detach().cpu().clone()
bias = layer.bias.detach().cpu().clone()
recipe = DelayedScaling(margin=0, interval=1, fp8_format=Format.HYBRID, amax_history_len=4)
xs = [torch.randn(4, 16) * 3, torch.randn(4, 16) * 2, torch.randn(4, 16)]
worst, worst_fp32 = 0.0, 0.0
sx, sw, sg = 1.0, 1.0, 1.0
x_hist, w_hist, g_hist = [], [], []
for x in xs:
    x_dev = x.to("hpu").requires_grad_()
    with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
        out = layer(x_dev)
    g = torch.randn(4, 8) * 1000
    out.backward(g.to("hpu"))
    # the reference, by hand
    if x_hist:
        sx, sw = pow2_scale(max(x_hist), E4M3_MAX), pow2_scale(max(w_hist), E4M3_MAX)
        sg = pow2_scale(max(g_hist), 57344.0)
    x8 = q(x, sx, torch.float8_e4m3fn, E4M3_MAX)
    w8 = q(weight, sw, torch.float8_e4m3fn, E4M3_MAX)
    g8 = q(g, sg, torch.float8_e5m2, 57344.0)
    ref = x8 @ w8.T + bias
    pairs = [(out, ref), (x_dev.grad, g8 @ w8), (layer.weight.grad, g8.T @ x8),
             (layer.bias.grad, g.sum(0))]
    worst = max([worst] + [((a.detach().cpu() - b).abs().max() / b.abs().max()).item()
                           for a, b in pairs])
    fp32 = F.linear(x, weight, bias)
    worst_fp32 = max(worst_fp32, ((out.detach().cpu() - fp32).abs().max()
                                  / fp32.abs().max()).item())
    x_hist.append(x.abs().max().item()); w_hist.append(weight.abs().max().item())
    g_hist.append(g.abs().max().item())
    layer.weight.grad = None; layer.bias.grad = None
print("fp8 vs reference", worst)
print("fp8 vs fp32", worst_fp32)
print("scales", layer.fp8_meta["scaling_fwd"].scale.cpu().tolist(), [sx, sw])
plain = layer(xs[0].to("hpu")).detach().cpu()
print("outside autocast equal", torch.equal(plain, F.linear(xs[0], weight, bias)))
# by default a HYBRID backward rounds stochastically (the loop above set PT_TE_FORCE_SR_BWD=0
# to compare exactly): the gradient moves off the nearest-rounding one, within E5M2's precision
del os.environ["PT_TE_FORCE_SR_BWD"]
x_dev = xs[0].to("hpu").requires_grad_()
with te.fp8_autocast(enabled=True, fp8_recipe=DelayedScaling(fp8_format=Format.HYBRID)):
    out = layer(x_dev)  # a new recipe: fresh scales of 1
drawn = torch.autograd.grad(out, x_dev, g.to("hpu"))[0].cpu()
nearest = q(g, 1.0, torch.float8_e5m2, 57344.0) @ q(weight, 1.0, torch.float8_e4m3fn, E4M3_MAX)
print("stochastic backward", not torch.equal(drawn, nearest),
      ((drawn - nearest).abs().max() / nearest.abs().max()).item() < 0.3)
os.environ["PT_TE_FORCE_SR_BWD"] = "0"
big = torch.tensor([1000.0, 300.0, -300.0, 1.0], device="hpu")
casted, amax = torch.ops.hpu.cast_to_fp8_v2(big, None, False, True, torch.float8_e4m3fn)
print("saturates at", casted.float().cpu().tolist(), "amax", amax.item())

# the casts and the GEMM traced by torch.compile (hpu_backend), as the bridge's own op tests do
def fp8_matmul(a, b, scale):
    a8, _ = torch.ops.hpu.cast_to_fp8_v2(a, scale, False, False, torch.float8_e4m3fn)
    b8, _ = torch.ops.hpu.cast_to_fp8_v2(b, scale, False, False, torch.float8_e4m3fn)
    inv = scale.reciprocal()
    return (torch.ops.hpu.fp8_gemm_v2(a8, False, b8, True, None, torch.float32, inv, inv),
            torch.ops.hpu.cast_from_fp8(a8, inv, torch.float32))
a, b, scale = torch.randn(4, 16), torch.randn(8, 16), torch.tensor(4.0)
got, back = torch.compile(fp8_matmul, backend="hpu_backend")(a.to("hpu"), b.to("hpu"),
                                                            scale.to("hpu"))
a8, b8 = q(a, 4.0, torch.float8_e4m3fn, E4M3_MAX), q(b, 4.0, torch.float8_e4m3fn, E4M3_MAX)
print("compiled fp8 equal", torch.allclose(got.cpu(), a8 @ b8.T, atol=1e-5),
      torch.equal(back.cpu(), a8))

# DeepSpeed 0.19.8's HPU FPQuantizer: per-group tensor scales, quantize then dequantize
val = torch.randn(4, 32) * torch.tensor([[0.01], [1.0], [100.0], [1e4]])
scale = torch.finfo(torch.float8_e4m3fn).max / val.abs().max(dim=1, keepdim=True)[0]
quant, _ = torch.ops.hpu.cast_to_fp8_v2(val.to("hpu"), scale.to("hpu"), False,
                                        dtype=torch.float8_e4m3fn)
back = torch.ops.hpu.cast_from_fp8(quant, (1.0 / scale).to("hpu"), torch.float32)
want = (val * scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float() * (1.0 / scale)
print("deepspeed fp quantizer equal", torch.equal(back.cpu(), want))

# Accelerate's fp8 (Transformer Engine backend), which imports intel_transformer_engine on HPU
from accelerate import Accelerator
from accelerate.utils import TERecipeKwargs
acc = Accelerator(mixed_precision="fp8", kwargs_handlers=[TERecipeKwargs()])
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt = acc.prepare(model, opt)
x = torch.randn(8, 32, device=acc.device)
losses = []
for _ in range(5):
    loss = model(x).pow(2).mean()
    acc.backward(loss)
    opt.step()
    opt.zero_grad()
    losses.append(loss.item())
layers = [m for m in model.modules() if type(m) is te.Linear]
print("accelerate fp8", acc.device.type, len(layers),
      all(m.fp8_meta["scaling_fwd"].steps == 5 for m in layers), losses[-1] < losses[0])
"""

GAUDI1 = r"""
import torch
import habana_frameworks.torch.hpex.experimental.transformer_engine as te

print("available", te.fp8.is_fp8_available())
layer = te.Linear(4, 4)
try:
    with te.fp8_autocast(enabled=True):
        layer(torch.randn(2, 4, device="hpu"))
except AssertionError as exc:
    print("autocast refused:", exc)
with te.fp8_autocast(enabled=False):
    print("disabled autocast runs", tuple(layer(torch.randn(2, 4, device="hpu")).shape))
try:
    torch.ops.hpu.cast_to_fp8_v2(torch.ones(2, device="hpu"), None, False, False,
                                 torch.float8_e4m3fn)
except RuntimeError as exc:
    print("cast refused:", str(exc).splitlines()[0])
try:
    torch.ops.hpu.softmax_fp8(torch.ones(2, 3, device="hpu", dtype=torch.bfloat16), -1)
except RuntimeError as exc:
    print("softmax refused:", str(exc).splitlines()[0])
"""


SATURATED = {"gaudi2": "[240.0, 240.0, -240.0, 1.0]", "gaudi3": "[448.0, 288.0, -288.0, 1.0]"}


@pytest.mark.parametrize("generation", ["gaudi2", "gaudi3"])
def test_transformer_engine_linear_trains_in_fp8_like_the_reference(run, generation):
    env = {"HPU_PLUGIN_EMULATE": generation, "PT_TE_FORCE_SR_BWD": "0"}
    lines = run(TRAIN, env).stdout.splitlines()
    assert lines[0] == "available (True, '')"
    worst = float(next(x for x in lines if x.startswith("fp8 vs reference")).split()[-1])
    assert worst <= 1e-5
    fp32 = float(next(x for x in lines if x.startswith("fp8 vs fp32")).split()[-1])
    assert 0.0 < fp32 <= 0.08  # fp8 really rounds, within E4M3's precision
    scales = next(x for x in lines if x.startswith("scales"))
    got, want = scales[len("scales "):].split("] [")
    assert [float(v) for v in got.strip("[]").split(", ")] == [
        float(v) for v in want.strip("[]").split(", ")]
    assert "outside autocast equal True" in lines
    assert "stochastic backward True True" in lines
    assert "compiled fp8 equal True True" in lines
    assert "deepspeed fp quantizer equal True" in lines
    assert f"saturates at {SATURATED[generation]} amax 1000.0" in lines
    # Accelerate converted both nn.Linear to te.Linear, ran 5 fp8 steps, and the loss fell
    assert "accelerate fp8 hpu 2 True True" in lines


def test_delayed_scaling_advances_in_hpu_graph_replays(run):
    # an fp8 layer stepped outside a graph once, then captured and replayed (lazy mode, as
    # optimum-habana's HPU graphs run it): each replay rolls the amax history and rescales
    # from it, so the graph gives the eager layer's outputs, history and scales step by step
    run("""
        import copy
        import torch
        import habana_frameworks.torch as ht
        import habana_frameworks.torch.hpex.experimental.transformer_engine as te
        from habana_frameworks.torch.hpex.experimental.transformer_engine.recipe import (
            DelayedScaling, Format)

        torch.manual_seed(0)
        recipe = DelayedScaling(fp8_format=Format.HYBRID, amax_history_len=4)
        eager = te.Linear(16, 8).to("hpu")
        graphed = copy.deepcopy(eager)
        xs = [torch.randn(4, 16, device="hpu") * 2.0 ** i for i in range(6)]
        static_x = xs[0].clone()
        g = ht.hpu.HPUGraph()
        with torch.no_grad(), te.fp8_autocast(enabled=True, fp8_recipe=recipe):
            first = eager(xs[0]).cpu()
            assert torch.equal(graphed(static_x).cpu(), first)  # makes the scaling state
            g.capture_begin()
            static_y = graphed(static_x)
            g.capture_end()
            assert torch.equal(static_y.cpu(), eager(xs[0]).cpu())
            for x in xs[1:]:
                static_x.copy_(x)
                g.replay()
                expected = eager(x)
                assert torch.equal(static_y.cpu(), expected.cpu())
        got, want = graphed.fp8_meta["scaling_fwd"], eager.fp8_meta["scaling_fwd"]
        assert torch.equal(got.amax_history.cpu(), want.amax_history.cpu())
        assert torch.equal(got.scale.cpu(), want.scale.cpu())
        assert want.scale.cpu().tolist() != [1.0, 1.0]  # the scales did move
        """, {"PT_HPU_LAZY_MODE": "1"})


def test_fp8_is_refused_on_first_generation_gaudi_with_the_transformer_engine_message(run):
    out = run(GAUDI1, {"HPU_PLUGIN_EMULATE": "gaudi"}).stdout
    assert "available (False, 'FP8 not supported on Gaudi, Gaudi2 or higher required')" in out
    assert "autocast refused: FP8 not supported on Gaudi, Gaudi2 or higher required" in out
    assert "disabled autocast runs (2, 4)" in out
    assert "cast refused: cast_to_fp8_v2: fp8 is not supported on GAUDI" in out
    assert "softmax refused: softmax_fp8: fp8 is not supported on GAUDI" in out


SCALED_MM = r"""
import torch
torch.manual_seed(0)
a8 = (torch.rand(12, 16) * 5.0).to(torch.float8_e4m3fn)
b8 = (torch.rand(16, 24) * 10.0).to(torch.float8_e4m3fn)
a, b = a8.float(), b8.float()
sa, sb, sr = torch.tensor(2.71), torch.tensor(3.14), torch.tensor(0.05)
hpu = lambda t: t.to("hpu")
# the bridge's own reference (test_hpu_scaled_mm_25): mm * scale_a * scale_b * scale_result
expected = a @ b * sa * sb * sr
got = torch._scaled_mm(hpu(a8), hpu(b8), scale_a=hpu(sa), scale_b=hpu(sb),
                       scale_result=hpu(sr), out_dtype=torch.float8_e4m3fn)
err = ((got.float().cpu() - expected).abs() / expected.abs()).max().item()
print("fp8 out", got.dtype, got.device.type, err <= 0.125)
bf = torch._scaled_mm(hpu(a8), hpu(b8), scale_a=hpu(sa), scale_b=hpu(sb),
                      out_dtype=torch.bfloat16)
ref = a @ b * sa * sb
print("bf16 out", ((bf.float().cpu() - ref).abs() / ref.abs()).max().item() <= 0.015)
huge = torch._scaled_mm(hpu(a8), hpu(b8), scale_a=hpu(sa), scale_b=hpu(sb),
                        out_dtype=torch.float8_e4m3fn)
print("saturates at", huge.float().max().item(), "nan", huge.float().isnan().any().item())
try:
    torch._scaled_mm(hpu(a8), hpu(b8.float().to(torch.float8_e5m2)), scale_a=hpu(sa),
                     scale_b=hpu(sb), out_dtype=torch.bfloat16)
    print("mixed ok")
except RuntimeError as exc:
    print("mixed refused", "only on Gaudi3" in str(exc))
"""


@pytest.mark.parametrize("generation, limit, mixed", [
    ("gaudi2", "240.0", "mixed refused True"), ("gaudi3", "448.0", "mixed ok")])
def test_scaled_mm_computes_as_the_bridge(run, generation, limit, mixed):
    """``torch._scaled_mm`` on hpu multiplies by ``scale_result`` (torch's CPU kernel, which
    the emulator runs underneath, divides), saturates an fp8 result at the generation's E4M3
    limit instead of NaN, and takes mixed fp8 inputs only on Gaudi3."""
    out = run(SCALED_MM, {"HPU_PLUGIN_EMULATE": generation}).stdout
    assert "fp8 out torch.float8_e4m3fn hpu True" in out, out
    assert "bf16 out True" in out, out
    assert f"saturates at {limit} nan False" in out, out
    assert mixed in out, out


SOFTMAX = r"""
import itertools
import torch
hpu = lambda t: None if t is None else t.to("hpu")
torch.manual_seed(0)
x = torch.rand(5, 4, 4, 6, dtype=torch.bfloat16) * 4.0
worst = 0.0
cases = itertools.product((torch.bfloat16, torch.float8_e4m3fn), (None, torch.tensor(0.1)),
                          (None, (5, 4, 4, 6), (5, 1, 1, 6)))
for dtype, heads, add_shape in cases:
    add = None if add_shape is None else torch.rand(add_shape, dtype=torch.bfloat16)
    xin = x.to(dtype)
    got = torch.ops.hpu.softmax_fp8(hpu(xin), -1, hpu(torch.tensor(0.05)),
                                    hpu(torch.tensor(2.5)), hpu(heads), hpu(add))
    # the bridge's own reference (test_softmax_fp8)
    ref = xin.float() * (1.0 if heads is None else heads) * 0.05
    ref = ref if add is None else ref + add
    ref = (torch.softmax(ref, -1).to(torch.bfloat16) * 2.5).to(torch.float8_e4m3fn)
    assert got.dtype == torch.float8_e4m3fn and got.device.type == "hpu"
    torch.testing.assert_close(got.cpu().float(), ref.float(), atol=1e-2, rtol=0.1251)
    worst = max(worst, (got.cpu().float() - ref.float()).abs().max().item())
print("fp8 cases within the bridge's tolerance", worst)
plain = torch.ops.hpu.softmax_fp8(hpu(x), -1)
print("unscaled", plain.dtype, torch.allclose(plain.cpu().float(), torch.softmax(x.float(), -1),
                                              atol=4e-3))
scalar = torch.ops.hpu.softmax_fp8.Scalar_scales(hpu(x), -1, 0.05, 2.5)
heads = torch.ops.hpu.softmax_fp8.Scalar(hpu(x), -1, 0.05, 2.5, 0.1)
tensor_heads = torch.ops.hpu.softmax_fp8(hpu(x), -1, hpu(torch.tensor(0.05)),
                                         hpu(torch.tensor(2.5)), hpu(torch.tensor(0.1)))
print("scalar forms", scalar.dtype, torch.equal(heads.cpu().float(), tensor_heads.cpu().float()))
big = torch.ops.hpu.softmax_fp8.Scalar_scales(hpu(x), -1, 1.0, 1000.0)
print("saturates at", big.float().max().item())
for bad in (lambda: torch.ops.hpu.softmax_fp8(hpu(x), -1, hpu(torch.tensor(1.0))),
            lambda: torch.ops.hpu.softmax_fp8(hpu(x.float()), -1),
            lambda: torch.ops.hpu.softmax_fp8(hpu(x.to(torch.float8_e4m3fn)), -1),
            lambda: torch.ops.hpu.softmax_fp8(hpu(x), -1, fused_add=hpu(x))):
    try:
        bad()
        print("accepted")
    except RuntimeError as exc:
        print("refused:", str(exc).splitlines()[0])
compiled = torch.compile(lambda t: torch.ops.hpu.softmax_fp8.Scalar_scales(t, -1, 0.05, 2.5),
                         backend="hpu_backend")
print("compiled equal", torch.equal(compiled(hpu(x)).cpu().float(), scalar.cpu().float()))
"""


@pytest.mark.parametrize("generation, limit", [("gaudi2", "240.0"), ("gaudi3", "448.0")])
def test_softmax_fp8_computes_as_the_bridge_test(run, generation, limit):
    """``hpu::softmax_fp8`` (Neural Compressor's patched ``Softmax``): the bridge's op test
    ``test_softmax_fp8`` as reference and tolerance, bf16 out without scales, its checks'
    messages, and E4M3 saturation at the generation's limit."""
    out = run(SOFTMAX, {"HPU_PLUGIN_EMULATE": generation}).stdout
    assert "fp8 cases within the bridge's tolerance" in out, out
    assert "unscaled torch.bfloat16 True" in out, out
    assert "scalar forms torch.float8_e4m3fn True" in out, out
    assert f"saturates at {limit}" in out, out
    assert out.count("refused:") == 4, out
    assert "refused: Output and input scales must be both given or None" in out
    assert "refused: Input tensor must be of torch.bfloat16 or torch.float8_e4m3fn dtype." in out
    assert ("refused: If Input is of torch.float8_e4m3fn dtype then input scale must be given."
            in out)
    assert ("refused: FusedAdd available only for Float8 output, but input scale is not given."
            in out)
    assert "compiled equal True" in out, out


CONV = r"""
import torch
hpu = lambda t: None if t is None else t.to("hpu")
torch.manual_seed(0)
worst = 0.0
# the bridge's own test (test_conv2d_fp8): fp8-representable values, conv * scales + bias
for out_dtype in (torch.float, torch.bfloat16):
    for fp8_dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        for scaled in (True, False):
            x = torch.rand((8, 3, 28, 28), dtype=out_dtype).to(fp8_dtype).to(out_dtype)
            w = torch.rand((16, 3, 2, 2), dtype=out_dtype).to(fp8_dtype).to(out_dtype)
            b = torch.rand(16, dtype=out_dtype).to(fp8_dtype).to(out_dtype)
            sa = torch.tensor(1.4).to(out_dtype) if scaled else None
            sb = torch.tensor(2.3).to(out_dtype) if scaled else None
            got = torch.ops.hpu.conv2d_fp8(hpu(x).to(fp8_dtype), hpu(w).to(fp8_dtype), hpu(b),
                                           (1, 1), (0, 0), (1,), 1, out_dtype, hpu(sa), hpu(sb))
            ref = torch.nn.functional.conv2d(x, w, None, (1, 1), (0, 0), (1,), 1)
            ref = ref * (sa * sb if scaled else 1) + b.view(1, -1, 1, 1)
            rtol = 0.02 if out_dtype == torch.bfloat16 and scaled else 1e-2
            assert got.dtype == out_dtype and got.device.type == "hpu"
            torch.testing.assert_close(got.cpu(), ref, atol=1e-2, rtol=rtol)
            worst = max(worst, (got.cpu().float() - ref.float()).abs().max().item())
print("conv cases within the bridge's tolerance", worst)
x8 = torch.rand(4, 3, 12, 12).to(torch.float8_e4m3fn)
w8 = torch.rand(16, 3, 2, 2).to(torch.float8_e4m3fn)
got = torch.ops.hpu.conv2d_fp8.scalar(hpu(x8), hpu(w8), None, (1,), (0, 0), (1, 1), 1,
                                      torch.float, 16, 0.23)
ref = torch.nn.functional.conv2d(x8.float(), w8.float()) * (16 * 0.23)
print("scalar form", torch.allclose(got.cpu(), ref, atol=1e-2, rtol=0.02))
print("default dtype", torch.ops.hpu.conv2d_fp8(hpu(x8), hpu(w8)).dtype)
conv = lambda a, b: torch.ops.hpu.conv2d_fp8(a, b, None, [2, 2], [1, 1], [1, 1], 1, torch.float)
got = torch.compile(conv, backend="hpu_backend")(hpu(x8), hpu(w8)).cpu()
want = torch.nn.functional.conv2d(x8.float(), w8.float(), None, 2, 1)
print("compiled equal", torch.equal(got, want))
for bad in (lambda: torch.ops.hpu.conv2d_fp8(hpu(x8[0]), hpu(w8)),
            lambda: torch.ops.hpu.conv2d_fp8(hpu(x8), hpu(w8), hpu(torch.ones(3))),
            lambda: torch.ops.hpu.conv2d_fp8(hpu(x8), hpu(w8), scale_input=hpu(torch.ones(2)))):
    try:
        bad()
        print("accepted")
    except RuntimeError as exc:
        print("refused:", str(exc).splitlines()[0])
"""


def test_conv2d_fp8_computes_as_the_bridge_test(run):
    """``hpu::conv2d_fp8`` (Neural Compressor's patched ``Conv2d``): the bridge's op test
    ``test_conv2d_fp8`` as reference and tolerance, bf16 out by default, its checks' messages."""
    out = run(CONV, {"HPU_PLUGIN_EMULATE": "gaudi2"}).stdout
    assert "conv cases within the bridge's tolerance" in out, out
    assert "scalar form True" in out, out
    assert "default dtype torch.bfloat16" in out, out
    assert "compiled equal True" in out, out
    assert out.count("refused:") == 3, out
    assert "refused: Input and weight must be 4D tensors" in out
    assert "refused: Bias must be 1D tensor with size equal to weight dim0" in out
    assert "refused: Multi-element scale tensors are not supported yet." in out
