"""The fast-path decisions: on for hpu by default, each switchable, replaceable by a third party."""

from __future__ import annotations

import pytest

from hpu_plugin.fast_paths.decisions import FAST_PATHS
from hpu_plugin.hookspecs import Refusal
from hpu_plugin.registry import Registry
from hpu_plugin.switches import Selection

MINE = """
from hpu_plugin.hookspecs import hookimpl

@hookimpl(tryfirst=True)
def hpu_fast_path(name, context):
    return False if name == "fused_sdpa" else None
"""


def _registry(eps) -> Registry:
    registry = Registry(Selection())
    registry.load_entry_points(eps)
    return registry


@pytest.fixture(autouse=True)
def _no_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HPU_PLUGIN_FAST", raising=False)
    for path in FAST_PATHS:
        monkeypatch.delenv(path.setting, raising=False)


def test_each_fast_path_is_on_by_default_and_unknown_names_are_off(site):
    registry = _registry(site.entry_points())
    assert [registry.fast_path(p.name, {}) for p in FAST_PATHS] == [True] * len(FAST_PATHS)
    assert not registry.fast_path("no_such_path", {})


def test_the_common_switch_and_each_own_switch(site, monkeypatch):
    registry = _registry(site.entry_points())
    monkeypatch.setenv("HPU_PLUGIN_FAST", "0")
    monkeypatch.setenv("HPU_PLUGIN_FAST_SDPA", "1")
    on = {p.name for p in FAST_PATHS if registry.fast_path(p.name, {})}
    assert on == {"fused_sdpa"}
    monkeypatch.setenv("HPU_PLUGIN_FAST", "on")
    monkeypatch.setenv("HPU_PLUGIN_FAST_OPTIMIZER", "off")
    assert not registry.fast_path("fused_optimizer", {})
    assert registry.fast_path("fused_clip_norm", {})


def test_a_bad_value_is_refused_with_the_variable_and_the_fix(site, monkeypatch):
    registry = _registry(site.entry_points())
    monkeypatch.setenv("HPU_PLUGIN_FAST_RMS_NORM", "sometimes")
    with pytest.raises(Refusal, match=r"HPU_PLUGIN_FAST_RMS_NORM.*sometimes.*=0 turns it off"):
        registry.fast_path("fused_rms_norm", {})


def test_a_third_party_turns_one_off_with_tryfirst(site):
    site.add("own-attention", MINE)
    registry = _registry(site.entry_points())
    assert not registry.fast_path("fused_sdpa", {"model": "LlamaAttention"})
    assert registry.fast_path("fused_optimizer", {})
    assert registry.call_order("hpu_fast_path") == ["own-attention", "fast_paths"]
