"""The emulated device through plain torch, in fresh interpreters with HPU_PLUGIN_EMULATE set.

Every script is user code: it imports torch, never hpu_plugin.
"""

from __future__ import annotations

from importlib import metadata

import pytest

#: The torch release installed, as (major, minor).
TORCH = tuple(int(part) for part in metadata.version("torch").split(".")[:2])

pytestmark = pytest.mark.e2e


def test_device_api_and_tensors_to_and_from_hpu(run):
    out = run("""
        import torch
        assert torch.hpu.is_available()
        assert torch.hpu.device_count() == 8 and torch.hpu.current_device() == 0
        assert torch.hpu.get_device_name() == "GAUDI2"
        assert torch.accelerator.current_accelerator().type == "hpu"
        a = torch.randn(4, 5)
        h = a.to("hpu")
        assert h.device == torch.device("hpu", 0) and h.data_ptr() != a.data_ptr()
        assert torch.equal(h.cpu(), a)
        assert torch.equal((h * 2 + 1).cpu(), a * 2 + 1)
        # views and in-place ops keep identity and storage
        v = h[1:3].t()
        v.mul_(0)
        assert v.device.type == "hpu" and h[1:3].abs().sum().item() == 0
        y = torch.empty(0, device="hpu")
        r = torch.add(h, 1, out=y)
        assert r is y and y.shape == h.shape
        # CUDA-like device checks: 0-dim CPU tensors mix, others do not
        assert torch.equal((h + torch.tensor(1.0)).cpu(), a_mod := h.cpu() + 1)
        try:
            h + torch.ones(4, 5)
        except RuntimeError as e:
            assert "Expected all tensors to be on the same device" in str(e), e
            assert "hpu:0 and cpu" in str(e), e
        else:
            raise AssertionError("a CPU operand was accepted")
        # memory statistics follow allocations
        before = torch.hpu.memory_allocated()
        big = torch.empty(1 << 20, device="hpu")
        assert torch.hpu.memory_allocated() - before == 4 << 20
        del big
        assert torch.hpu.memory_allocated() == before
        assert torch.hpu.max_memory_allocated() >= before + (4 << 20)
        free, total = torch.hpu.mem_get_info()
        assert total == 96 * 1024**3 and free == total - before
        assert torch.randn(3).pin_memory().is_pinned()
        print("ok")
    """)
    assert out.stdout.strip().endswith("ok")


def test_torch_event_on_hpu_times_in_milliseconds(run):
    """torch's generic events (``torch.Event(device="hpu")``, what device-neutral code and
    ``torch.accelerator`` users write) time through the device guard, as the bridge's does."""
    out = run("""
        import time, torch
        start = torch.Event(device="hpu", enable_timing=True)
        end = torch.Event(device="hpu", enable_timing=True)
        start.record()
        time.sleep(0.01)
        end.record()
        end.synchronize()
        print("ms", start.elapsed_time(end))
        try:
            torch.Event(device="hpu").elapsed_time(end)
        except ValueError as exc:
            print("untimed", exc)
    """)
    lines = dict(line.split(" ", 1) for line in out.stdout.strip().splitlines())
    assert 5 <= float(lines["ms"]) < 5000
    assert "enable_timing=True" in lines["untimed"]


def test_hpu_streams_take_hpu_events_as_the_bridges_do(run):
    """The bridge's ``torch.hpu.Stream`` waits on and records its own ``torch.hpu.Event``
    (``streams.py``: ``wait_event`` calls ``event.wait(self)``, ``record_event`` makes a
    ``torch.hpu.Event``); FSDP 2 does both with the device module's classes."""
    out = run("""
        import torch
        stream = torch.hpu.Stream()
        for event in (torch.hpu.Event(), torch.Event(device="hpu")):
            event.record()
            stream.wait_event(event)
        recorded = stream.record_event()
        stream.wait_stream(torch.hpu.current_stream())
        print(type(recorded).__name__, type(torch.hpu.current_stream()).__name__,
              recorded.query())
    """)
    assert out.stdout.split() == ["Event", "Stream", "True"]


def test_dynamo_traces_hpu_streams_and_events_as_cudas(run):
    """Importing the bridge gives dynamo a device interface for ``hpu``
    (``habana_frameworks/torch/dynamo/__init__.py``) and its ``torch.hpu.Event`` is a
    ``torch.Event``, so a compiled function with streams and events is one graph, with the
    stream calls as nodes: for the functions of torch's own ``test_ctx_manager.py`` with
    ``cuda`` put as ``hpu``, the node counts its CUDA tests expect (9 and 15)."""
    out = run("""
        import torch, torch._dynamo.testing
        from torch._dynamo.device_interface import get_interface_for_device

        def context(x):
            s = torch.hpu.Stream()
            x = torch.add(torch.mul(x, 5), 2)
            current = torch.hpu.current_stream()
            s.wait_stream(current)
            with torch.hpu.stream(s):
                x = torch.relu(x)
            current.wait_stream(s)
            return torch.cos(torch.add(x, 1))

        def methods(x):
            x = torch.add(torch.mul(x, 1), 2)
            new, current = torch.hpu.Stream(), torch.hpu.current_stream()
            new.wait_stream(current)
            with torch.hpu.stream(new):
                x = torch.add(torch.sin(x), 3)
            current.wait_stream(new)
            x = torch.add(x, 4)
            current.query()
            current.synchronize()
            with torch.hpu.stream(new):
                x = torch.add(x, 5)
            new.synchronize()
            return torch.cos(torch.relu(x))

        def events(x):
            current, new = torch.hpu.current_stream(), torch.hpu.Stream()
            event = current.record_event()
            new.wait_event(event)
            with torch.hpu.stream(new):
                x = torch.add(x, 4)
            done = torch.hpu.Event()
            done.record(new)
            done.wait(current)
            done.synchronize()
            return torch.cos(x)

        interface = get_interface_for_device("hpu")
        assert interface.Event is torch.hpu.Event and issubclass(torch.hpu.Event, torch.Event)
        x = torch.randn(2, 2, device="hpu")
        for fn in (context, methods, events):
            torch._dynamo.reset()
            counter, waits = torch._dynamo.testing.CompileCounter(), []
            def backend(graph, inputs):
                waits.extend(n for n in graph.graph.nodes if "wait_stream" in str(n.target))
                return counter(graph, inputs)
            got = torch.compile(fn, backend=backend, fullgraph=True)(x)
            assert torch.equal(got.cpu(), fn(x).cpu()), fn.__name__
            print(fn.__name__, counter.frame_count, counter.op_count, len(waits))
        print("hpu_backend", torch.equal(torch.compile(events, backend="hpu_backend")(x).cpu(),
                                         events(x).cpu()))
    """)
    lines = out.stdout.strip().splitlines()
    # one graph each, the streams' waits in it as nodes, on every release
    assert [line.split()[1::2] for line in lines[:2]] == [["1", "2"], ["1", "2"]], lines
    assert lines[2].startswith("events 1 ") and lines[3] == "hpu_backend True", lines
    # torch 2.9's Dynamo makes the stream's constructor and current_stream() nodes of their
    # own as well
    want = ["9", "15"] if TORCH >= (2, 10) else ["10", "17"]
    assert [line.split()[2] for line in lines[:2]] == want, lines


def test_hpu_streams_are_distinct_and_the_current_one_is_per_thread_as_the_bridges(run):
    # the bridge's eager/test_hpu_streams.py and HPUStream.cpp: a new stream has an id of its
    # own, the default stream is id 0 and current until set, the stream context sets and
    # restores it, per thread; a device without an index is the current device
    run("""
        import threading
        import torch
        import habana_frameworks.torch as ht

        s1, s2, default = ht.hpu.Stream(), ht.hpu.Stream(), ht.hpu.default_stream()
        assert default.id() == 0 and len({s1.id(), s2.id(), 0}) == 3
        assert s1 != s2 and s1 != default and ht.hpu.current_stream() == default
        with ht.hpu.stream(s1):
            assert ht.hpu.current_stream() == s1
            assert ht.hpu.default_stream() == default
            seen = []
            worker = threading.Thread(target=lambda: seen.append(ht.hpu.current_stream().id()))
            worker.start()
            worker.join()
            assert seen == [0]  # another thread keeps its own current stream
            with ht.hpu.stream(None):
                assert ht.hpu.current_stream() == s1
        assert ht.hpu.current_stream() == default
        ht.hpu.set_stream(s2)
        assert ht.hpu.current_stream().id() == s2.id()
        ht.hpu.set_stream(ht.hpu.default_stream())
        assert ht.hpu.get_stream_info(s1) == (torch.device("hpu", 0), s1.id())
        # torch's own stream API sees the same streams on the current device, not index -1
        assert torch.Stream(device="hpu").device_index == 0
        assert ht.hpu.Stream(device_index=-1).device_index == 0
        accelerator = getattr(torch, "accelerator", None)
        if accelerator is not None and str(accelerator.current_accelerator()) == "hpu":
            with ht.hpu.stream(s2):
                assert accelerator.current_stream().stream_id == s2.id()
        # work on any stream gives the CPU's result
        a = torch.randn(4, 4)
        with ht.hpu.stream(s1):
            got = (a.to("hpu") @ a.to("hpu")).cpu()
        s1.synchronize()
        assert torch.equal(got, a @ a)

        # and under torch.compile, in one graph (the bridge's compile/test_hpu_ctx_manager.py)
        def fn(x):
            s = ht.hpu.Stream()
            x = torch.add(torch.mul(x, 5), 2)
            current = ht.hpu.current_stream()
            s.wait_stream(current)
            with ht.hpu.stream(s):
                x = torch.relu(x)
            current.wait_stream(s)
            ht.hpu.set_stream(ht.hpu.default_stream())
            return torch.cos(torch.add(x, 1))

        x = torch.randn(2, 2, device="hpu")
        compiled = torch.compile(fn, backend="hpu_backend", fullgraph=True)
        assert torch.equal(compiled(x).cpu(), fn(x).cpu())
    """)


def test_training_step_equals_cpu(run):
    run("""
        import copy, torch
        torch.set_num_threads(1)
        torch.manual_seed(0)
        cpu = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
            torch.nn.Linear(32, 4))
        hpu = copy.deepcopy(cpu).to("hpu")
        opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (cpu, hpu)]
        x, t = torch.randn(8, 16), torch.randint(0, 4, (8,))
        for _ in range(3):
            for model, opt, dev in ((cpu, opts[0], "cpu"), (hpu, opts[1], "hpu")):
                loss = torch.nn.functional.cross_entropy(model(x.to(dev)), t.to(dev))
                loss.backward()
                opt.step()
                opt.zero_grad()
        for p, q in zip(cpu.parameters(), hpu.parameters()):
            assert q.device.type == "hpu"
            assert torch.equal(p, q.cpu()), (p - q.cpu()).abs().max()
    """)


def test_bf16_autocast(run):
    run("""
        import torch
        x = torch.randn(8, 8, device="hpu")
        lin = torch.nn.Linear(8, 8).to("hpu")
        with torch.autocast("hpu"):
            y = lin(x)
            s = torch.log_softmax(y, -1)
        assert torch.get_autocast_dtype("hpu") == torch.bfloat16
        assert y.dtype == torch.bfloat16 and y.device.type == "hpu"
        assert s.dtype == torch.bfloat16  # the bridge's lower-precision list has log_softmax
        with torch.autocast("cpu", dtype=torch.bfloat16):
            ref = lin.cpu()(x.cpu())
        assert torch.equal(y.cpu(), ref)
    """)


def test_autocast_follows_the_bridges_op_lists_not_cudas(run, tmp_path):
    # the bridge's own autocast test (any_mode/test_hpu_autocast.py), then ops whose policy
    # on HPU differs from CUDA's: softmax, log_softmax, mul, mean in bf16 (CUDA: float32 or
    # untouched), layer_norm casting its input only, div and exp in float32
    run("""
        import torch
        import torch.nn.functional as F
        a = torch.rand(5, 5, device="hpu") * 10
        b = torch.rand(5, 5, device="hpu") * 10

        def fn(a, b):
            mm = torch.mm(a, b)
            return mm, torch.log_softmax(mm, 0), torch.log_softmax(a, 0), torch.add(mm, mm)

        with torch.autocast("hpu", dtype=torch.bfloat16):
            got = fn(a, b)
            add_float = torch.add(a, b)
            mixed = torch.add(got[0], a)  # promote: the widest input
            lower = [torch.softmax(a, -1), a * b, a.mean(), torch.mm(a, b) * a]
            fp32 = [torch.mm(a, b) / 2, torch.mm(a, b).exp()]
            w, bias = torch.rand(5, device="hpu"), torch.rand(5, device="hpu")
            norm = F.layer_norm(a, (5,), w, bias)
        ref = fn(a.bfloat16(), b.bfloat16())
        for g, r in zip(got, ref):
            assert g.dtype == torch.bfloat16 and torch.equal(g.cpu(), r.cpu())
        assert add_float.dtype == torch.float32 and mixed.dtype == torch.float32
        assert all(t.dtype == torch.bfloat16 for t in lower), [t.dtype for t in lower]
        assert all(t.dtype == torch.float32 for t in fp32), [t.dtype for t in fp32]
        assert norm.dtype == torch.bfloat16
        assert torch.equal(norm.cpu(), F.layer_norm(a.bfloat16(), (5,), w, bias).cpu())
        print("defaults ok")
    """)
    # the lists from files, as PT_HPU_AUTOCAST_*_OPS_LIST name them (the bridge's custom test)
    (tmp_path / "lower.txt").write_text("add\nmm\n")
    (tmp_path / "fp32.txt").write_text("matmul\n")
    run("""
        import torch
        a = torch.rand(5, 5, device="hpu")
        with torch.autocast("hpu", dtype=torch.bfloat16):
            add, mm, matmul = torch.add(a, a), torch.mm(a, a), torch.matmul(a, a)
            softmax = torch.softmax(a, -1)  # in no list now
        assert add.dtype == mm.dtype == torch.bfloat16, (add.dtype, mm.dtype)
        assert matmul.dtype == softmax.dtype == torch.float32, (matmul.dtype, softmax.dtype)
    """, {"PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST": str(tmp_path / "lower.txt"),
          "PT_HPU_AUTOCAST_FP32_OPS_LIST": str(tmp_path / "fp32.txt")})


def test_rng_is_reproducible_and_only_device_0_has_state(run):
    run("""
        import torch
        torch.manual_seed(7)  # the real stack reseeds the HPU generator too
        a = torch.randn(5, device="hpu")
        d1 = torch.nn.functional.dropout(torch.ones(100, device="hpu"), 0.5)
        torch.manual_seed(7)
        b = torch.randn(5, device="hpu")
        d2 = torch.nn.functional.dropout(torch.ones(100, device="hpu"), 0.5)
        assert torch.equal(a.cpu(), b.cpu()) and torch.equal(d1.cpu(), d2.cpu())
        torch.hpu.manual_seed_all(3)
        state = torch.hpu.get_rng_state()
        c = torch.rand(4, device="hpu")
        torch.hpu.set_rng_state(state)
        assert torch.equal(c.cpu(), torch.rand(4, device="hpu").cpu())
        assert len(torch.hpu.get_rng_state_all()) == 1
        # the bridge's RuntimeErrors (habana_frameworks/torch/hpu/random.py)
        for call, text in ((lambda: torch.hpu.get_rng_state("hpu:1"),
                            "hpu get_rng_state supports only device 0"),
                           (lambda: torch.hpu.set_rng_state_all([state, state]),
                            "hpu set_rng_state_all supports only states len of 1")):
            try:
                call()
            except RuntimeError as exc:
                assert str(exc).startswith(text), exc
            else:
                raise AssertionError("RNG state beyond device 0 was accepted")
        g = torch.Generator(device="hpu").manual_seed(11)
        g2 = torch.Generator(device="hpu").manual_seed(11)
        assert g.device.type == "hpu"
        assert torch.equal(torch.randn(3, device="hpu", generator=g).cpu(),
                           torch.randn(3, device="hpu", generator=g2).cpu())
    """)


def test_save_load_and_safetensors_round_trips(run, tmp_path):
    run(f"""
        import torch
        from safetensors.torch import load_file, save_file
        x = {{"w": torch.randn(3, 4, device="hpu"), "i": torch.arange(6, device="hpu")}}
        torch.save(x, {str(tmp_path / "x.pt")!r})
        y = torch.load({str(tmp_path / "x.pt")!r})
        assert all(y[k].device.type == "hpu" and torch.equal(y[k].cpu(), x[k].cpu()) for k in x)
        z = torch.load({str(tmp_path / "x.pt")!r}, map_location="cpu")
        assert z["w"].device.type == "cpu" and torch.equal(z["w"], x["w"].cpu())
        save_file(x, {str(tmp_path / "x.safetensors")!r})
        s = load_file({str(tmp_path / "x.safetensors")!r}, device="hpu")
        assert all(s[k].device.type == "hpu" and torch.equal(s[k].cpu(), x[k].cpu()) for k in x)
    """)


def test_int64_beyond_int32_fails_like_the_real_stack_without_int64_support(run):
    script = """
        import torch
        assert torch.equal(torch.tensor([5, -7]).to("hpu").cpu(), torch.tensor([5, -7]))
        outcomes = []
        for make in (lambda: torch.tensor([2**40]).to("hpu"),
                     lambda: torch.tensor([1e12]).to("hpu", torch.long)):
            try:
                make()
            except RuntimeError as e:
                outcomes.append(str(e).splitlines()[0])
            else:
                outcomes.append("accepted")
        for line in outcomes:
            print(line)
    """
    off = run(script, {"PT_ENABLE_INT64_SUPPORT": "0"})
    lines = off.stdout.strip().splitlines()
    assert len(lines) == 2
    for line in lines:
        assert line.startswith("Error when trying to cast Long to Int, Input values range [")
        assert "exceeds Int range" in line
    on = run(script, {"PT_ENABLE_INT64_SUPPORT": "1"})
    assert on.stdout.split() == ["accepted", "accepted"]


def test_first_generation_gaudi_refuses_fp16_and_names_itself(run):
    run("""
        import torch
        assert torch.hpu.get_device_name() == "GAUDI"
        import habana_frameworks.torch.utils.experimental as htexp
        assert htexp._get_device_type() == htexp.synDeviceType.synDeviceGaudi
        torch.ones(2, dtype=torch.bfloat16, device="hpu")
        for make in (lambda: torch.ones(2, dtype=torch.float16, device="hpu"),
                     lambda: torch.ones(2, device="hpu").half()):
            try:
                make()
            except RuntimeError as e:
                assert "float16 is not supported on GAUDI" in str(e), e
            else:
                raise AssertionError("fp16 accepted on first-generation Gaudi")
    """, {"HPU_PLUGIN_EMULATE": "Gaudi"})


def test_allocation_past_the_device_memory_fails_with_the_real_oom_text(run):
    run("""
        import torch
        assert torch.hpu.mem_get_info()[1] == 8 * 1024 * 1024
        keep = torch.empty(1024 * 1024, device="hpu")  # 4 MiB of 8
        try:
            torch.empty(2 * 1024 * 1024, device="hpu")
        except torch.OutOfMemoryError as e:
            assert "FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed" in str(e), e
        else:
            raise AssertionError("allocation beyond the limit succeeded")
        try:
            keep.repeat(2)  # an op's output counts too
        except torch.OutOfMemoryError:
            pass
        else:
            raise AssertionError("an output beyond the limit was accepted")
        assert torch.hpu.memory_allocated() == 4 * 1024 * 1024
    """, {"HPU_PLUGIN_EMULATE_MEMORY": "8MiB"})


def test_a_fused_kernels_intermediates_are_its_workspace_not_device_memory(run):
    """A Gaudi fused kernel streams its input through the chip's local memory; the emulator
    computes its intermediates (float32 copies, the scaled values) as device tensors. Only
    what the kernel returns counts towards the peak and the limit."""
    run("""
        import torch

        n = 1024 * 1024  # bf16: 2 MiB; the kernel's float32 intermediates: 4 MiB each
        x = torch.ones(n, dtype=torch.bfloat16, device="hpu")
        torch.hpu.reset_peak_memory_stats()
        before = torch.hpu.memory_allocated()
        out, amax = torch.ops.hpu.cast_to_fp8_v2(x, None, False, True, torch.float8_e4m3fn)
        made = torch.hpu.memory_allocated() - before
        assert made == n + 4, made  # one byte a value, and the float32 maximum
        assert torch.hpu.max_memory_allocated() == before + made, (
            torch.hpu.max_memory_allocated(), before, made)
        assert out.float().cpu().eq(1).all() and amax.item() == 1.0
        # the same values through ordinary ops: every intermediate is device memory
        torch.hpu.reset_peak_memory_stats()
        plain = (x.float() * 1.0).clamp(-240, 240).to(torch.float8_e4m3fn)
        assert torch.hpu.max_memory_allocated() >= before + made + 8 * n
        del plain
        # 13 MiB in use of 16: a 4 MiB float32 copy of x would not fit; the 1 MiB output does
        filler = torch.empty(10 * n // 4, device="hpu")
        again, _ = torch.ops.hpu.cast_to_fp8_v2(x, None, False, True, torch.float8_e4m3fn)
        assert torch.hpu.memory_allocated() == before + 2 * made + filler.numel() * 4
        print("ok")
    """, {"HPU_PLUGIN_EMULATE_MEMORY": "16MiB"})


def test_a_fused_kernel_that_raises_leaves_the_peak_as_it_was(run):
    """Its intermediates, still alive in the exception's frames, are workspace too; a kernel
    inside another is part of the outer one."""
    run("""
        import torch
        from hpu_emulator import counters

        @counters.counted(counters.FUSED_KERNEL)
        def inner(x):
            return (x.float() * 2).to(x.dtype)  # 4 MiB of float32 on the way

        @counters.counted(counters.FUSED_KERNEL)
        def refusing(x):
            doubled = inner(x).float() + 1  # 4 MiB more, kept until the error is gone
            raise RuntimeError(f"refused after {doubled.numel()} values")

        x = torch.ones(1024 * 1024, dtype=torch.bfloat16, device="hpu")
        torch.hpu.reset_peak_memory_stats()
        before = torch.hpu.memory_allocated()
        try:
            refusing(x)
        except RuntimeError as e:
            assert "refused after" in str(e), e
        assert torch.hpu.max_memory_allocated() == before, (
            torch.hpu.max_memory_allocated(), before)
        assert torch.hpu.memory_allocated() == before
        out = inner(x)
        assert torch.hpu.max_memory_allocated() == before + 2 * 1024 * 1024
        print("ok")
    """)


def test_a_fused_kernels_output_past_the_device_memory_fails(run):
    run("""
        import torch

        big = torch.empty(3 * 1024 * 1024, device="hpu")  # 12 MiB of 16
        x = torch.ones(1024 * 1024, dtype=torch.bfloat16, device="hpu")  # 2 MiB
        try:  # 4 MiB of float32 output: past the limit
            torch.ops.hpu.cast_from_fp8(x.to(torch.float8_e4m3fn), None, torch.float32)
        except torch.OutOfMemoryError as e:
            assert "FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed" in str(e), e
        else:
            raise AssertionError("a kernel's output beyond the limit was accepted")
        assert torch.hpu.memory_allocated() == (12 + 2) * 1024 * 1024
        print("ok")
    """, {"HPU_PLUGIN_EMULATE_MEMORY": "16MiB"})


def test_visible_modules_and_device_count(run):
    out = run("""
        import os, torch
        print(torch.hpu.device_count(), torch.hpu.current_device(), torch.hpu.get_device_name(),
              torch.hpu.get_device_properties(1).module_id)
    """, {"HPU_PLUGIN_EMULATE": "gaudi3", "HPU_PLUGIN_EMULATE_MODULES": "5,4,7,6",
          "HPU_PLUGIN_EMULATE_DEVICES": "4", "HABANA_VISIBLE_MODULES": "7,6"})
    # the process acquired the first visible module, 7; every index describes that device
    assert out.stdout.split() == ["2", "0", "GAUDI3", "7"]


def test_standins_are_findable_and_behave_like_the_real_modules(run):
    run("""
        import importlib.util, os, sys, torch
        assert "torch._dynamo" not in sys.modules  # hpu_backend registers lazily
        assert importlib.util.find_spec("habana_frameworks") is not None
        assert importlib.util.find_spec("habana_frameworks.torch") is not None
        import habana_frameworks.torch as ht
        import habana_frameworks.torch.core as htcore
        import habana_frameworks.torch.hpu as hthpu
        import habana_frameworks.torch.distributed.hccl  # noqa: F401
        from habana_frameworks.torch.utils.experimental import _get_device_type, synDeviceType
        assert hthpu is torch.hpu
        assert _get_device_type() == synDeviceType.synDeviceGaudi2 == 4  # Synapse's value
        htcore.mark_step()
        assert os.environ["TORCHINDUCTOR_COMPILE_THREADS"] == "1"
        # hccl's import-time effects outside a distributed launch
        assert os.environ["MASTER_ADDR"] == "localhost" and os.environ["MASTER_PORT"] == "12345"
        assert "ID" not in os.environ  # set for a known rank only
        assert "hccl" in torch.distributed.Backend.backend_list
        from torch._dynamo import list_backends
        assert "hpu_backend" in list_backends()
    """)


def test_without_the_switch_nothing_of_the_emulator_loads(run):
    run("""
        import importlib.util, sys, torch
        loaded = [m for m in sys.modules if m.startswith("hpu_emulator")]
        assert not loaded, loaded
        assert not hasattr(torch, "hpu")
        assert importlib.util.find_spec("habana_frameworks") is None
    """, emulate=None)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"HPU_PLUGIN_EMULATE": "gaudi5"}, "HPU_PLUGIN_EMULATE='gaudi5'"),
        ({"HPU_PLUGIN_EMULATE_DEVICES": "9"}, "HPU_PLUGIN_EMULATE_DEVICES='9'"),
        ({"HPU_PLUGIN_EMULATE_DEVICES": "0"}, "HPU_PLUGIN_EMULATE_DEVICES='0'"),
        ({"HPU_PLUGIN_EMULATE_MODULES": "0,1,1"}, "HPU_PLUGIN_EMULATE_MODULES='0,1,1'"),
    ],
)
def test_bad_configuration_is_reported_and_import_torch_still_works(run, env, named):
    out = run("""
        import torch
        assert not hasattr(torch, "hpu")
        print(torch.ones(2).sum().item())
    """, env)
    assert out.stdout.strip() == "2.0"
    assert named in out.stderr and "accepted" in out.stderr


def test_emulation_beside_real_gaudi_software_is_refused(run, tmp_path):
    fake = tmp_path / "site" / "habana_frameworks"
    (fake / "torch").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "torch" / "__init__.py").write_text("")
    out = run("""
        import sys, torch
        # only the start-up line's check ran (hpu_emulator.early): no runtime, no stand-ins
        assert not {"hpu_emulator.runtime", "hpu_emulator.startup"} & set(sys.modules)
        assert not any("standins" in entry for entry in sys.path)
        assert not hasattr(torch, "hpu")
        print("imported")
    """, {"PYTHONPATH": str(tmp_path / "site")})
    assert out.stdout.strip() == "imported"
    assert "HPU_PLUGIN_EMULATE" in out.stderr and "habana_frameworks" in out.stderr


def test_a_missing_compiler_is_one_clear_message(run, tmp_path):
    out = run("""
        import torch
        assert not hasattr(torch, "hpu")
        print("imported")
    """, {"HPU_PLUGIN_CACHE_DIR": str(tmp_path / "cache"), "CXX": "no-such-compiler-xyz"})
    assert out.stdout.strip() == "imported"
    errors = [line for line in out.stderr.splitlines() if "hpu_plugin" in line]
    assert len(errors) == 1, out.stderr
    assert "CXX='no-such-compiler-xyz' is not on PATH" in errors[0] and "fix:" in errors[0]


def test_hl_smi_prints_like_the_real_tool_and_is_on_path_for_children(run):
    out = run("""
        import subprocess, torch
        print(subprocess.run(["hl-smi", "-Q", "index,module_id", "-f", "csv"],
                             capture_output=True, text=True, check=True).stdout, end="")
    """, {"HPU_PLUGIN_EMULATE_MODULES": "5,4,7,6", "HPU_PLUGIN_EMULATE_DEVICES": "4"})
    assert out.stdout == "index, module_id\n0, 5\n1, 4\n2, 7\n3, 6\n"
    direct = run("", {"HPU_PLUGIN_EMULATE_DEVICES": "2"},
                 args=[__import__("sys").executable, "-m", "hpu_emulator.fake_hlsmi",
                       "-Q", "index,module_id", "-f", "csv,noheader"])
    assert direct.stdout == "0, 0\n1, 1\n"


def test_the_emulators_patches_are_recorded_reversible_and_hook_through_one_finder(run):
    """``torch.manual_seed`` (reseeds the HPU generator, as on the real stack) and ``PATH``
    (``hl-smi`` for child processes) go through the emulator's ``Patches``; ``hpu_backend``
    is registered through the one post-import finder the host adapters also use."""
    out = run("""
        import os, shutil, subprocess, sys
        import torch
        torch.manual_seed(7)
        a = torch.randn(3, device="hpu")
        torch.manual_seed(7)
        assert torch.equal(torch.randn(3, device="hpu").cpu(), a.cpu())
        assert torch.random.manual_seed is torch.manual_seed
        listing = subprocess.run(["hl-smi", "-L"], capture_output=True, text=True, check=True)
        assert "HL-225" in listing.stdout, listing.stdout
        finders = [f for f in sys.meta_path if type(f).__module__.startswith("hpu_plugin")]
        assert len(finders) == 1, sys.meta_path
        compiled = torch.compile(lambda x: x + 1, backend="hpu_backend")
        assert compiled(torch.ones(2, device="hpu")).cpu().tolist() == [2.0, 2.0]
        from hpu_emulator import runtime
        assert runtime.patches.made[:2] == ["torch.manual_seed", "torch.random.manual_seed"]
        assert any("PATH" in made for made in runtime.patches.made), runtime.patches.made
        seeded, path = torch.manual_seed, os.environ["PATH"]
        runtime.patches.undo()
        assert torch.manual_seed is not seeded and not hasattr(torch.manual_seed, "__hpu_plugin__")
        assert os.environ["PATH"] != path and shutil.which("hl-smi") is None
        print("ok")
    """)
    assert out.stdout.strip().endswith("ok")


def test_bool_tensors_cross_to_and_from_the_device_byte_for_byte(run):
    # the bridge's lazy/test_hpu_view.py: a float tensor viewed as bool goes to the device
    # and is viewed back; its copy moves bytes, where the CPU's bool copy makes them 0/1
    run("""
        import torch
        a = torch.randn(8)
        b_hpu = a.view(torch.bool).to("hpu")
        assert torch.equal(b_hpu.view(torch.float).view(-1).cpu(), a)
        raw = torch.tensor([0, 7, 200, 1], dtype=torch.uint8)
        there = raw.view(torch.bool).to("hpu")
        assert there.view(torch.uint8).cpu().tolist() == [0, 7, 200, 1]
        assert there.cpu().view(torch.uint8).tolist() == [0, 7, 200, 1]  # and back
        assert there.clone().view(torch.uint8).cpu().tolist() == [0, 7, 200, 1]
        # an op on such bools treats every non-zero byte as true, as the CPU's kernels do
        assert torch.equal(there.logical_not().cpu(), raw.view(torch.bool).logical_not())
        # a bool from another dtype is still a cast (0/1)
        assert torch.tensor([0.0, 3.5]).to("hpu").bool().view(torch.uint8).cpu().tolist() == [0, 1]
    """)
