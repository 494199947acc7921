"""Lazy mode (``PT_HPU_LAZY_MODE=1``, the default of optimum-habana and lightning-habana) on
the emulator: accepted; ``mark_step()`` is where the accumulated graph runs, compiled once per
distinct graph and found in the recipe cache after, as the bridge's metrics count it; step
closures run there; what lazy mode refuses stays refused."""

from __future__ import annotations

LAZY = {"PT_HPU_LAZY_MODE": "1", "PT_HPU_ENABLE_CACHE_METRICS": "1"}


def test_mark_step_runs_the_accumulated_graph_and_lazy_mode_keeps_its_refusals(run):
    out = run("""
        import torch
        import habana_frameworks.torch.core as htcore
        from habana_frameworks.torch.hpu.metrics import metric_global

        compiled = metric_global("graph_compilation")
        cache = metric_global("recipe_cache")
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).to("hpu")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        htcore.mark_step()
        base = dict(compiled.stats())["TotalNumber"]

        def step(batch):
            opt.zero_grad(set_to_none=True)
            model(torch.ones(batch, 8, device="hpu")).sum().backward()
            opt.step()
            htcore.mark_step()
            return dict(compiled.stats())["TotalNumber"] - base

        counts = [step(4) for _ in range(4)]
        assert counts == [1, 1, 1, 1], counts      # one graph, compiled once
        assert step(6) == 2 and step(6) == 2       # a new shape: one more
        assert step(4) == 2                        # back to the first: a cache hit
        htcore.mark_step()                         # nothing accumulated: nothing to run
        assert dict(compiled.stats())["TotalNumber"] - base == 2
        hits = dict(cache.stats())
        assert hits["TotalMiss"] >= 2 and hits["TotalHit"] >= 4, hits

        # step closures run at the mark, not before
        seen = []
        htcore.add_step_closure(lambda value: seen.append(value), ("done",))
        assert seen == []
        htcore.mark_step()
        assert seen == ["done"]
        import habana_frameworks.torch.core.step_closure as sc
        sc._mark_step_if_lazy()

        import torch
        # torch.compile does not work in lazy mode: the plugin refuses it, naming the switch
        try:
            torch.compile(torch.nn.Linear(2, 2).to("hpu"))(torch.ones(1, 2, device="hpu"))
        except Exception as exc:
            assert "PT_HPU_LAZY_MODE" in str(exc), exc
        else:
            raise AssertionError("torch.compile in lazy mode was accepted")
        # with the switch on, int64 stays int64 in lazy mode too (common/lazy/utils.cpp)
        assert torch.tensor([2**40]).to("hpu").cpu().item() == 2**40
        assert torch.tensor([7]).to("hpu").cpu().item() == 7
        print("lazy", torch.hpu.is_available())
    """, {**LAZY, "PT_ENABLE_INT64_SUPPORT": "1"})
    assert "lazy True" in out.stdout


def test_lazy_ops_take_cpu_tensors_as_inputs_as_the_bridges_and_eager_ops_refuse_them(run):
    # the bridge's lazy ops move each CPU Tensor argument to the device (LazyOp::set_inputs),
    # as its lazy/test_dtype_host_cast.py and test_lazy_tensor_resize.py rely on; a tensor
    # list is not moved, nor is a CPU tensor the op would write; eager mode refuses as CUDA
    script = """
        import torch
        from hpu_emulator import counters

        h = torch.arange(6.0).to("hpu")
        c = torch.arange(6.0)
        refused = []
        calls = [
            ("eq", lambda: torch.eq(c, h)),
            ("add", lambda: h + c),
            ("index_copy_", lambda: torch.zeros(4, 6, device="hpu").index_copy_(
                0, torch.tensor([1]).to("hpu"), c.reshape(1, 6))),
            ("cat", lambda: torch.cat([h, c])),
            ("add_ into cpu", lambda: c.add_(h)),
        ]
        for name, call in calls:
            try:
                counters.reset()
                out = call()
                assert out.device.type == "hpu", out.device
                assert counters.snapshot()["copies_h2d"] >= 1  # the copy the bridge makes
                if name == "eq":
                    assert out.cpu().all()
            except RuntimeError as exc:
                assert "Expected all tensors to be on the same device" in str(exc), exc
                refused.append(name)
        print("REFUSED", refused)
    """
    lazy = run(script, LAZY).stdout
    assert "REFUSED ['cat', 'add_ into cpu']" in lazy, lazy
    eager = run(script).stdout
    assert "REFUSED ['eq', 'add', 'index_copy_', 'cat', 'add_ into cpu']" in eager, eager


def test_a_lazy_checkpoint_holds_cpu_tensors_and_loads_without_gaudi(run, tmp_path):
    """The bridge's lazy mode wraps ``torch.save`` (core/torch_overwrites.py): HPU tensors are
    written as CPU tensors, so a checkpoint saved by a lazy Gaudi job (an optimizer state,
    Accelerate's ``save_state``) loads where there is no Gaudi; ``torch.load`` reads onto the
    CPU and moves what it read to ``map_location``."""
    path = tmp_path / "state.pt"
    saved = run(f"""
        import json, torch
        model = torch.nn.Linear(4, 2).to("hpu")
        opt = torch.optim.AdamW(model.parameters())
        model(torch.ones(3, 4, device="hpu")).sum().backward()
        opt.step()
        torch.save({{"model": model.state_dict(), "opt": opt.state_dict(),
                    "shape": torch.Size([2])}}, {str(path)!r})
        back = torch.load({str(path)!r})
        moved = torch.load({str(path)!r}, map_location="hpu")
        print("RESULT" + json.dumps([back["model"]["weight"].device.type,
                                     moved["opt"]["state"][0]["exp_avg"].device.type]))
        """, LAZY)
    assert saved.stdout.split("RESULT")[1].strip() == '["cpu", "hpu"]', saved.stderr
    elsewhere = run(f"""
        import torch
        state = torch.load({str(path)!r})
        print("RESULT", state["model"]["weight"].device, state["shape"])
        """, emulate=None)
    assert "RESULT cpu torch.Size([2])" in elsewhere.stdout, elsewhere.stderr
