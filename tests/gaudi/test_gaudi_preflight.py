"""The pre-flight comparison across ranks: which rank differs, on which node, in what."""

from __future__ import annotations

import pytest

from hpu_plugin.gaudi import preflight
from hpu_plugin.gaudi.errors import GaudiConfigError
from hpu_plugin.gaudi.preflight import PreflightError, compare


def rank(r: int, node: int, module: int, per_process: bool = False, **facts: str) -> dict:
    base = {
        "rank": str(r), "node": f"host{node}", "node rank": str(node), "local rank": str(r % 2),
        "module": str(module), "one module per process": "yes" if per_process else "no",
        "Gaudi generation": "GAUDI2", "PT_HPU_LAZY_MODE": "0", "PT_ENABLE_INT64_SUPPORT": "1",
        "device selection": "HABANA_VISIBLE_MODULES unset (local rank i takes module i)",
        "hpu-plugin version": "0.1.0", "enabled plugins": "compile,ddp,device,quantization",
    }
    base.update(facts)
    return base


def two_nodes(**on_rank_3: str) -> list[dict]:
    return [rank(0, 0, 0), rank(1, 0, 1), rank(2, 1, 0), rank(3, 1, 1, **on_rank_3)]


def test_agreeing_ranks_pass():
    assert compare(two_nodes()) == []


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("Gaudi generation", "GAUDI3"),
        ("PT_HPU_LAZY_MODE", "1"),
        ("PT_ENABLE_INT64_SUPPORT", "0"),
        ("hpu-plugin version", "0.2.0"),
        ("enabled plugins", "ddp,device"),
        ("device selection", "HABANA_VISIBLE_MODULES lists 2 module(s) for the node's processes"),
    ],
)
def test_a_differing_rank_is_named_with_its_node_and_the_variable(variable, value):
    with pytest.raises(PreflightError) as caught:
        compare(two_nodes(**{variable: value}))
    message = str(caught.value)
    assert caught.value.variable == variable
    assert "node 'host1' (node rank 1), rank 3 differs from rank 0" in message
    assert repr(value) in message
    assert "Fix:" in message


def test_two_ranks_of_one_node_on_the_same_module_are_refused():
    ranks = [rank(0, 0, 3, True), rank(1, 0, 3, True)]
    with pytest.raises(PreflightError, match="rank 1 and rank 0 would both take module 3"):
        compare(ranks)


def test_the_same_module_on_two_nodes_is_fine():
    assert compare([rank(0, 0, 0), rank(1, 1, 0)]) == []


def test_one_module_per_process_groups_are_checked_per_node():
    assert compare([rank(0, 0, 2, True), rank(1, 0, 3, True)]) == []
    warnings = compare([rank(0, 0, 1, True), rank(1, 0, 2, True)])
    assert len(warnings) == 1 and "modules 1,2" in warnings[0]
    three = [rank(r, 0, r, True) for r in range(3)]
    with pytest.raises(GaudiConfigError, match="a group of 3 devices"):
        compare(three)


@pytest.mark.parametrize("raw", ["0", "-5", "soon", "nan", "inf"])
def test_a_bad_timeout_names_the_variable(raw):
    with pytest.raises(GaudiConfigError, match="HPU_PLUGIN_PREFLIGHT_TIMEOUT"):
        preflight.parse_timeout({"HPU_PLUGIN_PREFLIGHT_TIMEOUT": raw})


def test_the_timeout_default_and_setting():
    assert preflight.parse_timeout({}) == preflight.DEFAULT_TIMEOUT == 60.0
    assert preflight.parse_timeout({"HPU_PLUGIN_PREFLIGHT_TIMEOUT": "2.5"}) == 2.5
