"""The first-party plugins apply the Gaudi rules, and their refusals pass the registry's
fault isolation to reach the user (a GaudiConfigError is a Refusal)."""

from __future__ import annotations

import pytest

from hpu_plugin import machine, registry
from hpu_plugin.gaudi.config_error import GaudiConfigError
from hpu_plugin.loader import PluginRecord
from hpu_plugin.plugins import compile_backend as compile_plugin
from hpu_plugin.plugins import ddp as ddp_plugin
from hpu_plugin.switches import Selection


def _registry(*plugins) -> registry.Registry:
    reg = registry.Registry(Selection())
    for module in plugins:
        name = module.__name__.rsplit(".", 1)[1]
        reg.register(module, PluginRecord(name, module.__name__, "hpu-plugin", "0", True))
    return reg


@pytest.fixture
def server(monkeypatch):
    """This host shows the whole-server layout (as hl-smi on an 8-card server)."""
    machine.cached_index_module_map.cache_clear()
    monkeypatch.setattr(machine, "index_module_map", lambda *a, **k: {i: i for i in range(8)})
    yield
    machine.cached_index_module_map.cache_clear()


def _launch(monkeypatch, modules: str | None, processes: int, rank: int = 0) -> None:
    for name in ("HABANA_VISIBLE_MODULES", "HABANA_VISIBLE_DEVICES", "HLS_MODULE_ID"):
        monkeypatch.delenv(name, raising=False)
    if modules is not None:
        monkeypatch.setenv("HABANA_VISIBLE_MODULES", modules)
    monkeypatch.setenv("WORLD_SIZE", str(processes))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(processes))
    monkeypatch.setenv("LOCAL_RANK", str(rank))


def test_ddp_refuses_a_group_of_three_before_the_process_group(monkeypatch, server):
    _launch(monkeypatch, "0,1,2", 3)
    with pytest.raises(GaudiConfigError, match=r"HABANA_VISIBLE_MODULES=.0,1,2.*group of 3"):
        _registry(ddp_plugin).ddp_backend(None)


def test_ddp_refusal_lists_supported_pairs(monkeypatch, server):
    _launch(monkeypatch, "0,2", 2, 1)
    with pytest.raises(GaudiConfigError, match="0,1 \\| 2,3 \\| 4,5 \\| 6,7"):
        _registry(ddp_plugin).ddp_backend(None)


def test_ddp_chooses_hccl_on_a_supported_pair(monkeypatch, server):
    _launch(monkeypatch, "6,7", 2, 1)
    reg = _registry(ddp_plugin)
    assert reg.ddp_backend(None) == "hccl"
    assert reg.ddp_backend("hccl") == "hccl"


def test_ddp_outside_a_launcher_checks_nothing(monkeypatch, server):
    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HABANA_VISIBLE_MODULES", "0,2")
    assert _registry(ddp_plugin).ddp_backend(None) == "hccl"


def test_compile_in_lazy_mode_is_refused_with_the_fix(monkeypatch):
    monkeypatch.setenv("PT_HPU_LAZY_MODE", "1")
    with pytest.raises(GaudiConfigError, match=r"PT_HPU_LAZY_MODE=.1.*set PT_HPU_LAZY_MODE=0"):
        _registry(compile_plugin).compile_backend(None)


@pytest.mark.parametrize(
    ("requested", "chosen"), [(None, "hpu_backend"), ("inductor", "hpu_backend"), ("eager", None)]
)
def test_compile_in_eager_mode_picks_hpu_backend(monkeypatch, requested, chosen):
    monkeypatch.setenv("PT_HPU_LAZY_MODE", "0")
    assert _registry(compile_plugin).compile_backend(requested) == chosen


def test_ddp_leaves_an_explicit_non_hccl_backend_unchecked(monkeypatch, server):
    _launch(monkeypatch, "0,1,2", 3)
    assert _registry(ddp_plugin).ddp_backend("gloo") == "gloo"
    with pytest.raises(GaudiConfigError):
        _registry(ddp_plugin).ddp_backend("hccl")
