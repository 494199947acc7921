"""What the Gaudi bridge's own test suite (tests/pytest_working) imports and calls besides
the device, as the bridge has it: ``habana_frameworks.torch.dynamo.compile_backend`` (its
``hpu_backend`` and ``config`` flags), ``habana_frameworks.torch.utils.debug`` (the op counts
of ``FxGraphAnalyzer``, the recipe clean-up, the loggers) and ``torch.hpu``'s deterministic
switch."""

from __future__ import annotations


def test_compile_backend_registers_hpu_backend_and_keeps_its_config_flags(run):
    run("""
        import torch
        import habana_frameworks.torch.dynamo.compile_backend
        from habana_frameworks.torch.dynamo.compile_backend import config as hpu_backend_config
        from habana_frameworks.torch.dynamo.compile_backend.backends import hpu_backend
        from habana_frameworks.torch.dynamo.compile_backend.config import configuration_flags
        from torch._dynamo.backends.registry import lookup_backend

        assert lookup_backend("hpu_backend") is hpu_backend
        # the environment gives the defaults, as the bridge reads them at import
        assert hpu_backend_config.use_eager_fallback is False  # PT_HPU_USE_EAGER_FALLBACK=0
        assert hpu_backend_config.reinplace_add is True and hpu_backend_config.inference is True
        assert hpu_backend_config.decomposition_mode == "habana"
        # the older dictionary API and the config module's are the same flags
        configuration_flags["use_eager_fallback"] = True
        assert hpu_backend_config.use_eager_fallback is True
        with hpu_backend_config.patch(reinplace_add=False):
            assert configuration_flags["reinplace_add"] is False
        assert configuration_flags["reinplace_add"] is True

        # the imported backend compiles, forward and backward, to the CPU's results
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 2))
        x = torch.randn(4, 8)
        expected = model(x)
        expected.sum().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        model.to("hpu")
        got = torch.compile(model, backend=hpu_backend)(x.to("hpu"))
        got.sum().backward()
        torch.testing.assert_close(got.cpu(), expected)
        for p, g in zip(model.parameters(), grads):
            torch.testing.assert_close(p.grad.cpu(), g)
        """, {"PT_HPU_USE_EAGER_FALLBACK": "0"})
    # a value neither true nor false is refused with the variable's name, as the bridge does
    bad = run("import torch, habana_frameworks.torch.dynamo.compile_backend",
              {"PT_HPU_REINPLACE_ADD": "maybe"}, check=False)
    assert bad.returncode != 0 and "PT_HPU_REINPLACE_ADD: maybe" in bad.stderr, bad.stderr


def test_fx_graph_analyzer_counts_the_ops_of_each_graph_hpu_backend_compiles(run):
    run("""
        import torch
        import habana_frameworks.torch.dynamo.compile_backend
        from habana_frameworks.torch.utils.debug.dynamo_utils import FxGraphAnalyzer

        def fn(a, b):
            return (a + b) * b * b

        def fn2(a):
            return torch.relu(a) + 1

        with FxGraphAnalyzer(reset_dynamo=True) as outer:
            compiled = torch.compile(fn, backend="hpu_backend")
            with FxGraphAnalyzer() as inner:
                compiled(torch.ones(3, device="hpu"), torch.ones(3, device="hpu"))
            compiled(torch.ones(3), torch.ones(3))  # a CPU graph: nothing on hpu to count
            torch.compile(fn2, backend="hpu_backend")(torch.ones(2, device="hpu"))
        torch.compile(fn2, backend="hpu_backend", dynamic=True)(torch.ones(5, device="hpu"))

        summary = outer.get_ops_summary()
        assert len(summary) == 3, summary  # one per compiled graph, while entered only
        assert summary[0]["torch.ops.aten.add.Tensor"].graph_count == 1
        assert summary[0]["torch.ops.aten.mul.Tensor"].graph_count == 2
        assert all(c.eager_count == 0 for graph in summary for c in graph.values())
        assert summary[1] == {}
        assert set(summary[2]) == {"torch.ops.aten.relu.default", "torch.ops.aten.add.Tensor"}
        assert outer.get_partition_num() == 2
        assert [set(g) for g in inner.get_ops_summary()] == [set(summary[0])]

        # training: the forward and the backward graph are counted apart
        lin = torch.nn.Linear(4, 4).to("hpu")
        with FxGraphAnalyzer(reset_dynamo=True) as train:
            out = torch.compile(lin, backend="hpu_backend")(torch.ones(2, 4, device="hpu"))
            out.sum().backward()
        forward, backward = train.get_ops_summary()
        assert "torch.ops.aten.addmm.default" in forward, forward
        assert "torch.ops.aten.mm.default" in backward, backward
        """)


def test_debug_cleanup_recompiles_and_tensor_info_and_loggers_as_the_bridge(run, tmp_path):
    run("""
        import torch
        import habana_frameworks.torch.utils.debug as htdebug
        from habana_frameworks.torch.dynamo.debug_utils.logger import get_compile_backend_logger
        from habana_frameworks.torch.hpu.metrics import metric_global
        from habana_frameworks.torch.utils import _debug_C
        from habana_frameworks.torch.utils.debug.logger import enable_logging, get_log_level

        compiled = torch.compile(lambda t: t * 2 + 1, backend="hpu_backend")
        t = torch.ones(4, device="hpu")
        compiled(t)
        compiled(t)
        compilations = dict(metric_global("graph_compilation").stats())["TotalNumber"]
        assert compilations == 1
        htdebug._bridge_cleanup()  # the recipes in memory are gone: the same graph compiles
        compiled(t)                # again (no disk cache here: see the environment below)
        assert dict(metric_global("graph_compilation").stats())["TotalNumber"] == 2

        x = torch.zeros(8, 2, device="hpu")
        assert htdebug.get_tensor_info(x.cpu()) is None
        assert htdebug.get_tensor_info(x[1:]) == (x.data_ptr(), 64)  # the storage's
        assert htdebug._get_fallback_op_count() == {}

        # the loggers: critical only by default, then what enable_logging asks for
        logger = get_compile_backend_logger()
        assert not _debug_C.is_log_python_enabled(get_log_level("info"))
        logger.info("hidden %d", 1)
        enable_logging("LOG_LEVEL_ALL", "info")
        assert _debug_C.is_log_python_enabled(get_log_level("info"))
        assert not _debug_C.is_log_python_enabled(get_log_level("debug"))
        logger.info("shown {}", 2)
        logger.debug("hidden too")
        assert _debug_C.get_pt_logging_levels()["PT_PYTHON"] == 2
        """, {"HABANA_LOGS": str(tmp_path), "PT_HPU_RECIPE_CACHE_CONFIG": ""})
    # (the bridge's cleanup empties the recipe cache in memory, not on disk: with a disk
    # cache the graph is read back, not compiled; tests/emulation/test_recipe_cache.py)
    log = (tmp_path / "pytorch_log.txt").read_text()
    assert "[PT_COMPILE] shown 2" in log and "hidden" not in log, log
    # LOG_LEVEL_PT_PYTHON beats LOG_LEVEL_ALL, as the most specific variable does there
    run("""
        from habana_frameworks.torch.utils import _debug_C
        assert _debug_C.is_log_python_enabled(_debug_C.log_level.debug)
        assert not _debug_C.is_log_python_enabled(_debug_C.log_level.trace)
        assert _debug_C.get_pt_logging_levels()["PT_LAZY"] == 5
        """, {"LOG_LEVEL_PT_PYTHON": "1", "LOG_LEVEL_ALL": "5"})


def test_hpu_deterministic_switch_is_the_bridges_own_and_deprecated(run):
    run("""
        import warnings
        import torch

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert torch.hpu.getDeterministic() is False
            torch.use_deterministic_algorithms(True)
            assert torch.hpu.getDeterministic() is False  # torch's switch is apart
            torch.use_deterministic_algorithms(False)
            torch.hpu.setDeterministic(True)
            assert torch.hpu.getDeterministic() is True
            assert torch.are_deterministic_algorithms_enabled() is False
        texts = [str(w.message) for w in caught]
        assert any("setDeterministic is deprecated" in t for t in texts), texts
        assert any("use torch.are_deterministic_algorithms_enabled" in t for t in texts), texts
        # results stay those of the CPU with it on
        a = torch.randn(64, 64)
        torch.testing.assert_close((a.to("hpu") @ a.to("hpu")).cpu(), a @ a)
        """)


def test_hpu_set_inference_env_gives_the_model_back_with_conv_and_batch_norm_fused(run):
    # the bridge's compile/test_compile_conv_bn.py: model = htcore.hpu_set_inference_env(model)
    run("""
        import torch
        import habana_frameworks.torch.core as htcore

        model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                                    torch.nn.ReLU(), torch.nn.Conv2d(4, 2, 1))
        model[1].running_mean.normal_()
        model[1].running_var.uniform_(0.5, 2.0)
        model.eval()
        x = torch.randn(2, 3, 8, 8)
        with torch.no_grad():
            expected = model(x)
        fused = htcore.hpu_set_inference_env(model)
        assert isinstance(fused, torch.fx.GraphModule) and fused is not model
        called = [n.target for n in fused.graph.nodes if n.op == "call_module"]
        assert called == ["0", "2", "3"], called  # the batch norm is in the convolution
        with torch.no_grad():
            got = fused.to("hpu")(x.to("hpu"))
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)
        assert isinstance(model[1], torch.nn.BatchNorm2d)  # the caller's model is unchanged
        assert htcore.hpu_set_inference_env() is None
        assert htcore.hpu_set_env(model.train()) is model  # training: nothing to fuse
        assert htcore.hpu_set_inference_env(model.eval().to("hpu")) is model  # CPU only
        htcore.hpu_teardown_inference_env()
        """)


def test_shared_layer_fallbacks_and_graph_logs_as_the_bridges_tests_read_them(run):
    # the bridge's test_utils: clear_t_compile_logs / check_ops_executed_in_jit_ir read the
    # "requires fallback" lines and the JIT IR log; compile/test_dynamo_utils.py extends
    # hpu_fallback_op_list and counts the op as eager
    run("""
        import pytest, torch
        import habana_frameworks.torch.dynamo.compile_backend
        from habana_frameworks.torch.dynamo.compile_backend import config
        from habana_frameworks.torch.dynamo.compile_backend.passes import logger as graph_logger
        from habana_frameworks.torch.dynamo.compile_backend.shared_layer import (
            hpu_fallback_op_list, logger as fallback_logger)
        from habana_frameworks.torch.utils.debug.dynamo_utils import FxGraphAnalyzer

        graph_logger.set_store_data(True)
        fallback_logger.set_store_data(True)
        fn = torch.compile(lambda a, b: torch.relu(a + b) * 2, backend="hpu_backend")
        a, b = torch.randn(4, device="hpu"), torch.randn(4, device="hpu")
        torch.testing.assert_close(fn(a, b).cpu(), (torch.relu(a + b) * 2).cpu())
        assert "[PT_COMPILE] Node: add requires fallback: False" in fallback_logger.data
        ir = next(log for log in graph_logger.data if "####PyTorch-generated JIT IR" in log)
        assert "aten::add(" in ir and "aten::relu(" in ir and "aten::mul(" in ir, ir

        hpu_fallback_op_list.add("randint")
        def draw(t):
            return torch.randint(0, 10, (4,), device="hpu") + t
        with FxGraphAnalyzer(reset_dynamo=True) as fga:
            torch.compile(draw, backend="hpu_backend")(a)
        (graph,) = fga.get_ops_summary()
        randint = next(v for k, v in graph.items() if "randint" in k)
        assert (randint.graph_count, randint.eager_count) == (0, 1), graph
        assert graph["torch.ops.aten.add.Tensor"].graph_count == 1
        assert "[PT_COMPILE] Node: randint requires fallback: True" in fallback_logger.data
        # without the eager fallback such a node is refused, with the bridge's assertion
        config.use_eager_fallback = False
        torch._dynamo.reset()
        with pytest.raises(Exception, match="Node: randint requires fallback: True"):
            torch.compile(draw, backend="hpu_backend")(a)
        """)
