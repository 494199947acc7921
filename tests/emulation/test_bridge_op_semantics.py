"""Ops where the emulator follows the Gaudi bridge's own definition (its sources and op tests,
HabanaAI/gaudi-pytorch-bridge 1.19.0) rather than the CPU kernel underneath: user programs on
the emulated device, each value compared with what the bridge's source says it is."""

from __future__ import annotations

from processes import result_of


def test_dtypes_the_cpu_kernel_lacks_run_as_the_bridges_unsupported_dtype_path(run):
    """float8, bf16 and fp16 where torch's CPU kernel has no such dtype: the op runs in float32
    and its result comes back in the dtype it promises (hpu_ops/cpu_fallback_internal.h,
    ``_dispatch_fallback``: cast the floating arguments to float, redispatch, cast back)."""
    done = run("""
        import json, torch
        torch.manual_seed(0)
        x = (torch.randn(6, 5) * 8).to(torch.float8_e4m3fn)
        h = x.to("hpu")
        out = {}
        lo, hi = torch.aminmax(h)
        out["aminmax"] = [lo.dtype == x.dtype, lo.float().item() == x.float().min().item(),
                          hi.float().item() == x.float().max().item()]
        s = h + h                                   # add_stub has no float8 on the CPU
        want = (x.float() + x.float()).to(torch.float8_e4m3fn)
        out["add"] = [s.dtype == x.dtype, torch.equal(s.cpu().view(torch.uint8),
                                                      want.view(torch.uint8))]
        h.mul_(0.5)                                 # in place: written back in float8
        out["mul_"] = torch.equal(h.cpu().float(), (x.float() * 0.5).to(x.dtype).float())
        b = torch.randn(4, 3).bfloat16()
        t = torch.tensor([0, 2, 1, 1])
        loss = torch.nn.functional.multi_margin_loss(b.to("hpu"), t.to("hpu"))
        ref = torch.nn.functional.multi_margin_loss(b.float(), t).bfloat16()
        out["multi_margin"] = [loss.dtype == torch.bfloat16, loss.cpu().item() == ref.item()]
        # an op with its own dtype argument keeps it
        summed = torch.sum(x.to("hpu"), dtype=torch.float32)
        out["sum_dtype"] = summed.dtype == torch.float32
        print("RESULT" + json.dumps(out))
        """, {"PT_HPU_LAZY_MODE": "0"})
    r = result_of(done.stdout)
    assert r == {"aminmax": [True, True, True], "add": [True, True], "mul_": True,
                 "multi_margin": [True, True], "sum_dtype": True}, r


def test_ops_whose_cpu_kernel_refuses_what_the_bridge_takes(run):
    """Integer lerp is the bridge's sub, mult and add nodes in the dtype (lerp_gen.cpp); trunc
    of bool is identity (roundingfunc_gen.cpp); take takes int32 indices; integer uniform_
    draws integers in its bounds; bf16 _add_relu rounds each step as the bridge's op test's
    reference does; convolution_overrideable is the bridge's convolution hook; bernoulli takes
    any ``p`` (bernoulli_gen.cpp checks no range: below 0 draws 0, above 1 draws 1)."""
    done = run("""
        import json, torch
        torch.manual_seed(0)
        out = {}
        a = torch.randint(0, 15, (3, 4), dtype=torch.int32)
        b = torch.randint(0, 15, (3, 4), dtype=torch.int32)
        got = torch.lerp(a.to("hpu"), b.to("hpu"), 5).cpu()
        out["lerp"] = [got.dtype == torch.int32, torch.equal(got, a + (b - a) * 5)]
        flags = torch.tensor([True, False, True])
        out["trunc_bool"] = torch.equal(flags.to("hpu").trunc().cpu(), flags)
        values = torch.arange(10.0)
        idx = torch.tensor([7, 1, 3], dtype=torch.int32)
        out["take_int32"] = torch.equal(torch.take(values.to("hpu"), idx.to("hpu")).cpu(),
                                        values[idx.long()])
        drawn = torch.empty(1000, dtype=torch.int32, device="hpu").uniform_(-50, 10).cpu()
        out["uniform_int"] = [drawn.dtype == torch.int32, int(drawn.min()) >= -50,
                              int(drawn.max()) <= 10]
        x = torch.rand(2, 3, 7, dtype=torch.bfloat16)
        y = torch.rand(2, 3, 7, dtype=torch.bfloat16)
        alpha = torch.tensor(0.723, dtype=torch.bfloat16).item()
        other = torch.tensor(4.3, dtype=torch.bfloat16).item()
        t = torch._add_relu(x.to("hpu"), y.to("hpu"), alpha=alpha).cpu()
        s = torch._add_relu(x.to("hpu"), other, alpha=alpha).cpu()
        out["add_relu"] = [torch.equal(t, torch.relu(x + y * alpha)),
                           torch.equal(s, torch.relu(x + other * alpha))]
        i, w = torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3)
        conv = torch.ops.aten.convolution_overrideable(
            i.to("hpu"), w.to("hpu"), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1).cpu()
        out["conv_overrideable"] = torch.allclose(conv, torch.nn.functional.conv2d(i, w))
        p = torch.randn(2, 3, 4, 4)
        coin = [torch.bernoulli(p.to(dt).to("hpu")).cpu() for dt in (torch.float16, torch.float)]
        out["bernoulli_any_p"] = [bool((c[p < 0] == 0).all() and (c[p > 1] == 1).all())
                                  for c in coin]
        u = torch.tensor([3, 1, 3, 2], device="hpu")
        _, inverse, counts = torch._unique2(u, sorted=True, return_inverse=False,
                                            return_counts=True)
        _, inverse_only = torch._unique(u, sorted=True, return_inverse=False)
        out["unique_unasked"] = [inverse is None, counts.tolist(), inverse_only is None]
        print("RESULT" + json.dumps(out))
        """, {"PT_HPU_LAZY_MODE": "0"})
    r = result_of(done.stdout)
    assert r == {"lerp": [True, True], "trunc_bool": True, "take_int32": True,
                 "uniform_int": [True, True, True], "add_relu": [True, True],
                 "conv_overrideable": True, "bernoulli_any_p": [True, True],
                 "unique_unasked": [True, [1, 1, 2], True]}, r


def test_fp8_casts_moe_and_quantize_follow_the_bridge(run):
    """A bf16 cast to fp8 scales in bf16 (the scale cast to the input's dtype) and back in
    the output dtype; fp8_gemm_v2 scales the product, so a scale per output row works; the
    mixture of experts computes in the activations' dtype, its measurement overload gives
    each expert's maximum over all tokens on the host (eager_custom_op_register.cpp);
    quantize_per_tensor to float8 divides by the scale and does not round to an integer
    (quant_dequant_gen.cpp, its op test's reference)."""
    done = run("""
        import json, torch
        import torch.nn.functional as F
        import torch.ao.quantization.fx._decomposed  # noqa: F401 (defines the quantize ops)
        torch.manual_seed(0)
        out = {}
        x = torch.rand(16, 8, dtype=torch.bfloat16) * 30 + 10
        scale = torch.tensor(1.3)
        cast, _ = torch.ops.hpu.cast_to_fp8_v2(x.to("hpu"), scale.to("hpu"), False, False,
                                               torch.float8_e4m3fn)
        want = (x * scale.to(torch.bfloat16)).float().clamp(-240, 240).to(torch.float8_e4m3fn)
        back = torch.ops.hpu.cast_from_fp8(cast, scale.reciprocal().to("hpu"), torch.bfloat16)
        out["cast_bf16"] = [torch.equal(cast.cpu().view(torch.uint8), want.view(torch.uint8)),
                            torch.equal(back.cpu(), want.to(torch.bfloat16)
                                        * scale.reciprocal().to(torch.bfloat16))]
        A = (torch.rand(12, 24) * 10 + 30).to(torch.float8_e4m3fn)
        B = (torch.rand(24, 36) * 10 + 30).to(torch.float8_e4m3fn)
        rows = torch.rand(12) * 100
        got = torch.ops.hpu.fp8_gemm_v2(A.to("hpu"), False, B.to("hpu"), False, None,
                                        torch.bfloat16, [2.0], rows.tolist(), None, False,
                                        [12, 1]).cpu()
        ref = (A.float() @ B.float()) * 2.0 * rows[:, None]
        out["gemm_rows"] = torch.allclose(got.float(), ref, rtol=1e-2)
        h = torch.randn(5, 16, dtype=torch.bfloat16)
        weights, table = torch.topk(torch.randn(5, 4, dtype=torch.bfloat16), 2)
        w1 = [torch.randn(16, 32, dtype=torch.bfloat16) for _ in range(4)]
        w2 = [torch.randn(16, 32, dtype=torch.bfloat16) for _ in range(4)]
        w3 = [torch.randn(32, 16, dtype=torch.bfloat16) for _ in range(4)]
        res, amax = torch.ops.hpu.mixture_of_experts.fp8_measurement(
            h.to("hpu"), table.to("hpu"), weights.to("hpu"), [w.to("hpu") for w in w1],
            [w.to("hpu") for w in w2], [w.to("hpu") for w in w3], False, "silu", 0, 3, True)
        padded = torch.zeros(5, 4, dtype=torch.bfloat16).scatter_(-1, table, weights)
        expect, peaks = torch.zeros_like(h), []
        for e in range(4):
            both = F.silu(h @ w1[e]) * (h @ w2[e])
            peaks.append(both.amax().float())
            expect += (both @ w3[e]) * padded[:, e:e + 1]
        out["moe"] = [torch.equal(res.cpu(), expect), amax.device.type,
                      torch.equal(amax, torch.stack(peaks))]
        q = torch.rand(4, 8) * 1000
        qh = torch.ops.quantized_decomposed.quantize_per_tensor(
            q.to("hpu"), 5.0, 10, 20, 125, torch.float8_e4m3fn).cpu()
        out["quantize_fp8"] = torch.equal(
            qh.float(), torch.clamp(q / 5.0 + 10, 20, 125).to(torch.float8_e4m3fn).float())
        print("RESULT" + json.dumps(out))
        """, {"PT_HPU_LAZY_MODE": "0"})
    r = result_of(done.stdout)
    assert r == {"cast_bf16": [True, True], "gemm_rows": True, "moe": [True, "cpu", True],
                 "quantize_fp8": True}, r


def test_rng_and_flags_as_the_bridge_keeps_them(run):
    """One generator, device 0's, refused for another index with the bridge's RuntimeError;
    ``seed()`` and ``manual_seed()`` return what the bridge's do; ``torch.seed`` reseeds the
    device and ``torch.random.fork_rng`` forks it by default (core/torch_overwrites.py);
    ``bridge_config`` answers each flag's own value."""
    done = run("""
        import json, os, torch
        import habana_frameworks.torch.internal.bridge_config as bc
        out = {}
        try:
            torch.hpu.get_rng_state(1)
            out["other_device"] = "no error"
        except RuntimeError as exc:
            out["other_device"] = str(exc).split(" (")[0]
        out["seed"] = isinstance(torch.hpu.seed(), int)
        out["manual_seed"] = isinstance(torch.hpu.manual_seed(3), torch.Generator)
        torch.seed()
        out["torch_seed"] = torch.hpu.initial_seed() == torch.initial_seed()
        before = torch.hpu.get_rng_state()
        with torch.random.fork_rng():
            torch.manual_seed(1234)
            inside = torch.hpu.get_rng_state()
        out["fork_rng"] = [not torch.equal(before, inside),
                           torch.equal(before, torch.hpu.get_rng_state())]
        out["int64_flag"] = bc.get_pt_enable_int64_support() == (
            os.environ.get("PT_ENABLE_INT64_SUPPORT") == "1")
        out["unset_flag"] = bc.get_pt_hpu_enable_refine_dynamic_shapes()
        with bc.env_setting("PT_HPU_GRAPH_DUMP_MODE", "all"):
            out["set"] = bc.get_pt_hpu_graph_dump_mode()
        out["restored"] = bc.get_pt_hpu_graph_dump_mode()
        print("RESULT" + json.dumps(out))
        """, {"PT_HPU_LAZY_MODE": "0", "HPU_PLUGIN_EMULATE_DEVICES": "1"})
    r = result_of(done.stdout)
    assert r == {"other_device": "hpu get_rng_state supports only device 0", "seed": True,
                 "manual_seed": True, "torch_seed": True, "fork_rng": [True, True],
                 "int64_flag": True, "unset_flag": False, "set": "all", "restored": ""}, r


def test_each_random_op_seeds_its_kernel_with_one_draw_of_the_generator(run):
    """The bridge's HPU generator is a mt19937 (backend/random.cpp): after one seed its state
    equals the CPU's (its own ``test_hpu_rng_state``), and each random op takes one 32-bit
    number from it to seed the device kernel (``get_seed_hpu``). So the device's values are
    another stream than the CPU's for the same seed (probabilities drawn on the CPU and then
    drawn against on ``hpu`` are not compared with themselves), the state moves by one draw
    an op, and the same seed gives the same values again."""
    done = run("""
        import json, torch
        out = {}
        torch.manual_seed(1234)
        out["state_as_cpu"] = torch.equal(torch.hpu.get_rng_state(), torch.get_rng_state())
        out["initial_seed"] = torch.hpu.initial_seed()
        p = torch.rand(2000)
        draws = torch.bernoulli(p.to("hpu")).cpu()
        out["bernoulli_mean"] = round(float(draws.mean()), 1)
        torch.manual_seed(1234)
        on_hpu = torch.randn(1000, device="hpu").cpu()
        out["another_stream"] = not torch.equal(on_hpu, torch.randn(1000))
        one_draw = torch.Generator().manual_seed(1234)
        torch.empty(1).uniform_(generator=one_draw)  # one 32-bit draw
        out["one_draw_an_op"] = torch.equal(torch.hpu.get_rng_state(), one_draw.get_state())
        torch.hpu.manual_seed(1234)
        out["repeats"] = torch.equal(torch.randn(1000, device="hpu").cpu(), on_hpu)
        print("RESULT" + json.dumps(out))
        """, {"PT_HPU_LAZY_MODE": "0", "HPU_PLUGIN_EMULATE_DEVICES": "1"})
    r = result_of(done.stdout)
    assert r == {"state_as_cpu": True, "initial_seed": 1234, "bernoulli_mean": 0.5,
                 "another_stream": True, "one_draw_an_op": True, "repeats": True}, r


def test_unseeded_the_generator_starts_from_the_processes_own_seed(run):
    """backend/random.cpp ``createHPUGenerator``: the HPU generator is made at first use with
    the CPU default generator's seed, which torch draws afresh in every process; so unseeded
    runs (and the ranks of a job) draw different dropout masks, as on a Gaudi."""
    code = """
        import json, torch
        print("RESULT" + json.dumps([torch.hpu.initial_seed(), torch.initial_seed(),
                                     torch.rand(4, device="hpu").cpu().tolist()]))
        """
    first, second = (result_of(run(code).stdout) for _ in range(2))
    assert first[0] == first[1] and second[0] == second[1], (first, second)
    assert first[0] != second[0] and first[2] != second[2], (first, second)


def test_a_lazy_index_copy_reads_its_source_before_writing(run):
    """A KV cache updated from its own rows: the bridge's lazy graph reads the source before
    it writes (its lazy pass ``replace_inplace_ops`` makes the write a copy of an out-of-place
    result; the bridge's lazy ``test_kvcache_inplace``), where torch's CPU kernel refuses the
    overlap. In eager mode the bridge's kernel states no order for an overlap, and the
    emulator keeps torch's refusal rather than guess one."""
    code = """
        import json, torch
        y = torch.arange(8.0).reshape(4, 2)
        h = y.to("hpu")
        try:
            h.index_copy_(0, torch.tensor([1, 2], device="hpu"), h[0:2])
            out = h.cpu().tolist()
        except RuntimeError as exc:
            out = str(exc).splitlines()[0]
        print("RESULT" + json.dumps(out))
        """
    lazy = result_of(run(code, {"PT_HPU_LAZY_MODE": "1"}).stdout)
    want = torch_index_copy_of_a_copy()
    assert lazy == want, lazy
    eager = result_of(run(code, {"PT_HPU_LAZY_MODE": "0"}).stdout)
    assert isinstance(eager, str) and "single memory location" in eager, eager


def torch_index_copy_of_a_copy() -> list[list[float]]:
    import torch

    y = torch.arange(8.0).reshape(4, 2)
    return y.index_copy(0, torch.tensor([1, 2]), y[0:2].clone()).tolist()
