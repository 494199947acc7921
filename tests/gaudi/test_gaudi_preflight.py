"""The pre-flight comparison across ranks: which rank differs, on which node, in what."""

from __future__ import annotations

import pytest

from hpu_plugin import settings
from hpu_plugin.gaudi import preflight
from hpu_plugin.gaudi.config_error import GaudiConfigError
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


def test_an_exported_hls_module_id_taken_by_two_ranks_is_named_with_its_fix():
    """hccl keeps a set HLS_MODULE_ID: exported to a launcher, every rank inherits it."""
    ranks = [rank(r, 0, 5, **{"module set by HLS_MODULE_ID": "yes"}) for r in range(2)]
    with pytest.raises(PreflightError, match="rank 1 and rank 0 would both take module 5"
                       ) as caught:
        compare(ranks)
    assert caught.value.variable == "HLS_MODULE_ID"
    assert "Fix: unset HLS_MODULE_ID" in str(caught.value)


def test_the_same_module_on_two_nodes_is_fine():
    assert compare([rank(0, 0, 0), rank(1, 1, 0)]) == []


def test_one_module_per_process_groups_are_checked_per_node():
    assert compare([rank(0, 0, 2, True), rank(1, 0, 3, True)]) == []
    warnings = compare([rank(0, 0, 1, True), rank(1, 0, 2, True)])
    assert len(warnings) == 1 and "modules 1,2" in warnings[0]
    three = [rank(r, 0, r, True) for r in range(3)]
    with pytest.raises(GaudiConfigError, match="a group of 3 devices"):
        compare(three)


@pytest.mark.parametrize("raw", [
    "0", "-5", "soon", "nan", "inf", "1e3", "1_0", "0x10", "\u0663", "\uff13", "60s", "9" * 40,
    "700000", " -1 ",
])
def test_a_bad_timeout_names_the_variable_the_value_and_the_fix(raw):
    """Read by the one settings parser: what ``float()`` alone would take (exponents,
    underscores, non-ASCII digits) is refused like any other setting's bad value."""
    with pytest.raises(GaudiConfigError) as info:
        preflight.parse_timeout({"HPU_PLUGIN_PREFLIGHT_TIMEOUT": raw})
    error = info.value
    assert error.variable == "HPU_PLUGIN_PREFLIGHT_TIMEOUT" and error.value == raw
    assert f"HPU_PLUGIN_PREFLIGHT_TIMEOUT={raw!r}" in str(error)
    assert "unset it for the default of 60 s" in error.fix and error.fix in str(error)


@pytest.mark.parametrize("raw, seconds", [
    (None, 60.0), ("", 60.0), ("  ", 60.0), ("2.5", 2.5), (" 30 ", 30.0), ("0.5", 0.5),
    (".5", 0.5), ("604800", 604800.0),
])
def test_the_timeout_default_and_setting(raw, seconds):
    environ = {} if raw is None else {"HPU_PLUGIN_PREFLIGHT_TIMEOUT": raw}
    assert preflight.parse_timeout(environ) == seconds
    assert preflight.DEFAULT_TIMEOUT == 60.0


@pytest.mark.parametrize("raw", ["soon", "1e3", "\u0663", "0", "", "12", "0.25"])
def test_the_timeout_agrees_with_the_settings_parser(raw):
    """The same answer as every other time setting gets, refusals included."""
    try:
        expected: object = settings.seconds("HPU_PLUGIN_PREFLIGHT_TIMEOUT", raw, 60.0)
    except settings.SettingError as exc:
        expected = str(exc)
    try:
        got: object = preflight.parse_timeout({"HPU_PLUGIN_PREFLIGHT_TIMEOUT": raw})
    except GaudiConfigError as exc:
        got = str(exc)
        assert isinstance(expected, str) and exc.supported in expected and exc.fix in expected
        return
    assert got == expected
