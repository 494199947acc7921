"""HPU graphs on the emulator, used as Gaudi users use them (lazy mode, ``PT_HPU_LAZY_MODE=1``).

What is checked is what a user can tell on Gaudi: replay recomputes from the static inputs'
current values, outputs live in the graph's memory (a replay overwrites them), a new input
shape captures a new graph and costs one compilation in the bridge's metrics while a replay
costs none, the bridge's refusals keep its texts, and the API exists only in lazy mode.
"""

from __future__ import annotations

LAZY = {"PT_HPU_LAZY_MODE": "1", "PT_HPU_ENABLE_CACHE_METRICS": "1"}


def test_capture_and_replay_recompute_into_the_graphs_memory(run):
    run("""
        import torch
        import habana_frameworks.torch as ht
        from habana_frameworks.torch.hpu.metrics import metric_global

        compiled = metric_global("graph_compilation")
        static_x = torch.arange(6, dtype=torch.float32).to("hpu")
        weight = torch.full((6,), 2.0, device="hpu")
        ht.core.mark_step()
        before = dict(compiled.stats())["TotalNumber"]

        g = ht.hpu.HPUGraph()
        s = ht.hpu.Stream()
        with ht.hpu.stream(s):
            g.capture_begin()
            y = static_x * weight + 1
            z = y.relu().sum()
            g.capture_end()
        assert dict(compiled.stats())["TotalNumber"] == before + 1  # capture compiles once
        first = y
        assert torch.equal(y.cpu(), torch.arange(6.0) * 2 + 1)

        for step in range(3):
            static_x.copy_(torch.full((6,), float(step)))  # a host-to-device copy
            g.replay()
            assert y is first  # the same output tensor, overwritten in place
            assert torch.equal(y.cpu(), torch.full((6,), 2.0 * step + 1)), y.cpu()
            assert z.item() == 6 * (2.0 * step + 1)
        assert dict(compiled.stats())["TotalNumber"] == before + 1  # replays compile nothing

        # the with-statement form, and a factory inside the captured work
        g2 = ht.hpu.HPUGraph()
        with ht.hpu.graph(g2):
            filled = torch.full((4,), 1, device="hpu") + static_x[:4]
        static_x.zero_()
        g2.replay()
        assert torch.equal(filled.cpu(), torch.ones(4)), filled.cpu()

        # the bridge's refusals during a capture, with its texts
        g3 = ht.hpu.HPUGraph()
        g3.capture_begin()
        for call in (lambda: ht.hpu.HPUGraph().capture_begin(), g.replay):
            try:
                call()
            except RuntimeError as exc:
                assert "FATAL ERROR :: MODULE:PT_DEVICE GRAPH::" in str(exc), exc
            else:
                raise AssertionError("refused by the bridge, accepted here")
        g3.capture_end()

        # a collective during capture, refused as by the bridge's ProcessGroupHCCL
        import socket
        import torch.distributed as dist
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        dist.init_process_group("hccl", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                                world_size=1)
        t = torch.ones(2, device="hpu")
        g4 = ht.hpu.HPUGraph()
        g4.capture_begin()
        try:
            dist.all_reduce(t)
        except RuntimeError as exc:
            assert "collective nonSFG is not supported during hpu graph capturing" in str(exc)
        else:
            raise AssertionError("a collective during capture was accepted")
        finally:
            g4.capture_end()
        dist.all_reduce(t)  # outside a capture it works
        assert t.cpu().tolist() == [1.0, 1.0]
        dist.destroy_process_group()
        print("ok")
    """, LAZY)


def test_wrap_in_hpu_graph_gives_eager_results_and_a_graph_per_input_shape(run):
    run("""
        import copy
        import torch
        import habana_frameworks.torch as ht
        from habana_frameworks.torch.hpu.metrics import metric_global

        torch.manual_seed(0)
        cpu_model = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)
        ).eval()
        model = ht.hpu.wrap_in_hpu_graph(copy.deepcopy(cpu_model).to("hpu"))
        compiled = metric_global("graph_compilation")
        cache = metric_global("recipe_cache")
        ht.core.mark_step()
        start = dict(compiled.stats())["TotalNumber"]
        outputs = []
        with torch.no_grad():
            for batch in (2, 2, 3, 2, 3, 5):
                x = torch.randn(batch, 8)
                out = model(x.to("hpu"))
                torch.testing.assert_close(out.cpu(), cpu_model(x), rtol=0, atol=0)
                outputs.append(out)
        # three shapes: three captures, each compiled once; the repeats are replays
        assert dict(compiled.stats())["TotalNumber"] == start + 3, compiled.stats()
        # a kept reference is the graph's output tensor, overwritten by the next replay
        assert outputs[0] is outputs[1] is outputs[3] and outputs[2] is outputs[4]
        model.clear_cache()
        with torch.no_grad():
            model(torch.randn(2, 8).to("hpu"))
        assert dict(compiled.stats())["TotalNumber"] == start + 3  # same graph: a cache hit
        assert dict(cache.stats())["TotalHit"] >= 1

        # max_graphs: beyond it the plain forward runs, still right
        limited = ht.hpu.wrap_in_hpu_graph(torch.nn.Linear(8, 2).to("hpu"), max_graphs=1)
        ref = limited.weight.detach().cpu(), limited.bias.detach().cpu()
        with torch.no_grad():
            a = limited(torch.ones(1, 8, device="hpu"))
            b = limited(torch.ones(3, 8, device="hpu"))
            c = limited(torch.ones(3, 8, device="hpu"))
        assert b is not c  # not captured: fresh outputs each call
        torch.testing.assert_close(c.cpu(), torch.ones(3, 8) @ ref[0].T + ref[1])

        # disable_tensor_cache and the bridge's per-call switches
        lean = ht.hpu.wrap_in_hpu_graph(torch.nn.Linear(8, 2).to("hpu"), disable_tensor_cache=True)
        w, bias = lean.weight.detach().cpu(), lean.bias.detach().cpu()
        with torch.no_grad():
            for value in (1.0, 2.0, 3.0):
                x = torch.full((2, 8), value)
                torch.testing.assert_close(lean(x.to("hpu")).cpu(), x @ w.T + bias)
            x = torch.full((2, 8), 7.0)
            torch.testing.assert_close(
                lean(x.to("hpu"), bypass_hpu_graphs=True).cpu(), x @ w.T + bias)
        print("ok")
    """, LAZY)


def test_transformers_model_in_hpu_graphs_matches_cpu(run):
    run("""
        import torch
        import habana_frameworks.torch as ht
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
        torch.manual_seed(0)
        cpu = LlamaForCausalLM(cfg).eval()
        model = LlamaForCausalLM(cfg).eval()
        model.load_state_dict(cpu.state_dict())
        model = ht.hpu.wrap_in_hpu_graph(model.to("hpu"))
        with torch.no_grad():
            for seed in range(3):
                ids = torch.randint(0, 128, (2, 7), generator=torch.Generator().manual_seed(seed))
                want = cpu(input_ids=ids, use_cache=False).logits
                got = model(input_ids=ids.to("hpu"), use_cache=False).logits
                torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
        print("ok")
    """, LAZY)


def test_graphed_training_equals_eager_training(run):
    run("""
        import copy
        import torch
        import habana_frameworks.torch as ht

        torch.manual_seed(0)
        xs = [torch.randn(4, 6) for _ in range(5)]
        ys = [torch.randn(4, 3) for _ in range(5)]

        def train(model, step_fn):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            losses = []
            for x, y in zip(xs, ys):
                opt.zero_grad(set_to_none=True)
                loss = torch.nn.functional.mse_loss(step_fn(x.to("hpu")), y.to("hpu"))
                loss.backward()
                opt.step()
                ht.core.mark_step()
                losses.append(loss.item())
            return losses, [p.detach().cpu() for p in model.parameters()]

        base = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
        eager = copy.deepcopy(base).to("hpu")
        want = train(eager, eager)

        graphed_model = copy.deepcopy(base).to("hpu")
        graphed = ht.hpu.make_graphed_callables(graphed_model, (torch.randn(4, 6).to("hpu"),))
        got = train(graphed_model, graphed)
        assert got[0] == want[0], (got[0], want[0])
        for a, b in zip(got[1], want[1]):
            torch.testing.assert_close(a, b, rtol=0, atol=0)

        # ModuleCacher: a graph per input signature for the training forward and backward
        cached_model = copy.deepcopy(base).to("hpu")
        ht.hpu.ModuleCacher(max_graphs=4)(model=cached_model, inplace=True)
        got = train(cached_model, cached_model)
        assert got[0] == want[0], (got[0], want[0])
        for a, b in zip(got[1], want[1]):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        print("ok")
    """, LAZY)


def test_hpu_graphs_are_lazy_mode_only_as_on_the_bridge(run):
    run("""
        import torch
        import habana_frameworks.torch.hpu.graphs as graphs
        # the real package star-imports graphs only in lazy mode
        assert not hasattr(torch.hpu, "wrap_in_hpu_graph") and not hasattr(torch.hpu, "HPUGraph")
        try:
            graphs.HPUGraph()
        except RuntimeError as exc:
            assert "PT_HPU_LAZY_MODE=1" in str(exc), exc
        else:
            raise AssertionError("an HPU graph in eager mode was accepted")
        print("ok")
    """, {"PT_HPU_LAZY_MODE": "0"})


def test_a_dry_run_capture_draws_no_random_numbers_and_writes_no_tensor(run):
    # the bridge's lazy/test_hpu_graph.py test_module_cacher_propnet_rand: a model that draws
    # its input in place (normal_) trained through ModuleCacher(dry_run=True) gives the plain
    # model's outputs from the same seed; the bridge builds a dry-run graph without launching
    # it, so the first replay is the first draw and the first write
    run("""
        import torch
        import habana_frameworks.torch as ht

        class PropRand(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin1, self.lin2 = torch.nn.Linear(20, 25), torch.nn.Linear(25, 3)

            def forward(self, inp):
                inp.normal_()
                return self.lin2(self.lin1(inp).relu()).relu()

        def train(model, inputs):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            torch.manual_seed(0)
            outs = []
            for i, t in enumerate(inputs):
                if hasattr(model, "set_iteration_count"):
                    model.set_iteration_count(i)
                out = model(t.to("hpu"))
                torch.nn.functional.mse_loss(out.sum(), torch.tensor(1.0, device="hpu")).backward()
                ht.core.mark_step()
                opt.step()
                ht.core.mark_step()
                outs.append(out.cpu())
            return outs

        torch.manual_seed(123)
        plain = PropRand().to("hpu")
        torch.manual_seed(123)
        cached = ht.hpu.ModuleCacher()(model=PropRand().to("hpu"), inplace=True,
                                       have_grad_accumulation=True, allow_unused_input=True,
                                       dry_run=True)
        inputs = [torch.rand(1, 20) for _ in range(4)]
        for got, expected in zip(train(cached, inputs), train(plain, inputs)):
            torch.testing.assert_close(got, expected)

        # a dry-run capture of its own: the generator and a tensor it writes are as before
        # until the replay, which draws and writes once
        counter = torch.zeros(4, device="hpu")
        torch.manual_seed(1)
        g = ht.hpu.HPUGraph()
        g.capture_begin(dry_run=True)
        counter.add_(1)
        noise = torch.rand(4, device="hpu")
        g.capture_end()
        assert counter.cpu().tolist() == [0.0] * 4, counter.cpu()
        g.replay()
        torch.manual_seed(1)
        assert torch.equal(noise.cpu(), torch.rand(4, device="hpu").cpu())
        assert counter.cpu().tolist() == [1.0] * 4

        # wrap_in_hpu_graph(dry_run=True) replays right after the capture, as the bridge:
        # a module's in-place update happens once a call
        class Count(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("calls", torch.zeros(()))

            def forward(self, x):
                self.calls += 1
                return torch.nn.functional.dropout(x, 0.5) + self.calls

        for disable_tensor_cache in (False, True):
            module, reference = Count().to("hpu"), Count().to("hpu")
            wrapped = ht.hpu.wrap_in_hpu_graph(module, dry_run=True,
                                               disable_tensor_cache=disable_tensor_cache)
            torch.manual_seed(5)
            got = [wrapped(torch.ones(8, device="hpu")).cpu() for _ in range(3)]
            torch.manual_seed(5)
            expected = [reference(torch.ones(8, device="hpu")).cpu() for _ in range(3)]
            assert module.calls.item() == 3
            assert all(torch.equal(a, b) for a, b in zip(got, expected))
        """, LAZY)
