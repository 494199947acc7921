"""The switches: parsed, validated, and applied to first- and third-party plugins alike."""

from __future__ import annotations

import logging

import pytest

from hpu_plugin.errors import SettingError
from hpu_plugin.registry import Registry
from hpu_plugin.switches import Selection

PLAIN = """
from hpu_plugin.hookspecs import hookimpl

@hookimpl(tryfirst=True)
def hpu_ddp_backend(requested):
    return "gloo"
"""


def _load(site, environ) -> Registry:
    registry = Registry(Selection.from_environ(environ))
    registry.load_entry_points(site.entry_points())
    return registry


def _status(registry: Registry) -> dict[str, str]:
    return {name: record.status for name, record in registry.records.items()}


def test_defaults_load_everything(site):
    site.add("extra", PLAIN)
    registry = _load(site, {})
    assert set(_status(registry).values()) == {"enabled"}
    assert registry.ddp_backend(None) == "gloo"


def test_disable_names_plugins_of_either_party(site):
    site.add("extra", PLAIN)
    registry = _load(site, {"HPU_PLUGIN_DISABLE": " extra , ddp"})
    assert _status(registry)["extra"] == "disabled" and _status(registry)["ddp"] == "disabled"
    assert "HPU_PLUGIN_DISABLE" in registry.records["extra"].reason
    assert registry.ddp_backend(None) is None
    assert _status(registry)["compile"] == "enabled"


def test_only_loads_the_listed_plugins(site):
    site.add("extra", PLAIN)
    site.add("other", PLAIN)
    registry = _load(site, {"HPU_PLUGIN_ONLY": "extra,device"})
    assert {n for n, s in _status(registry).items() if s == "enabled"} == {"extra", "device"}
    assert registry.records["ddp"].reason == "not in HPU_PLUGIN_ONLY"


def test_no_third_party_keeps_first_party_only(site):
    site.add("extra", PLAIN)
    registry = _load(site, {"HPU_PLUGIN_NO_THIRD_PARTY": "1"})
    assert _status(registry)["extra"] == "disabled"
    assert "HPU_PLUGIN_NO_THIRD_PARTY" in registry.records["extra"].reason
    assert registry.ddp_backend(None) == "hccl"


def test_package_off_shows_every_plugin_disabled(site):
    registry = _load(site, {"HPU_PLUGIN_DISABLE": "1"})
    assert set(_status(registry).values()) == {"disabled"}


def test_unknown_name_in_a_switch_is_warned_not_fatal(site, caplog):
    registry = _load(site, {"HPU_PLUGIN_DISABLE": "compile-polcy"})
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("HPU_PLUGIN_DISABLE" in w and "compile-polcy" in w and "ddp" in w
               for w in warnings)
    assert _status(registry)["ddp"] == "enabled"


@pytest.mark.parametrize("environ", [
    {}, {"HPU_PLUGIN_DISABLE": ""}, {"HPU_PLUGIN_DISABLE": "0"},
    {"HPU_PLUGIN_ONLY": ""}, {"HPU_PLUGIN_NO_THIRD_PARTY": "off"},
    {"HPU_PLUGIN_IMPORT_BUDGET": ""},
])
def test_unset_and_off_values_select_everything(environ):
    selection = Selection.from_environ(environ)
    assert selection == Selection()


def test_budget_is_read():
    assert Selection.from_environ({"HPU_PLUGIN_IMPORT_BUDGET": " 0.25 "}).import_budget == 0.25


@pytest.mark.parametrize("variable, value", [
    ("HPU_PLUGIN_DISABLE", "1,extra"),
    ("HPU_PLUGIN_DISABLE", "a b"),
    ("HPU_PLUGIN_DISABLE", ",,"),
    ("HPU_PLUGIN_ONLY", "true"),
    ("HPU_PLUGIN_ONLY", "x;y"),
    ("HPU_PLUGIN_NO_THIRD_PARTY", "maybe"),
    ("HPU_PLUGIN_IMPORT_BUDGET", "two"),
    ("HPU_PLUGIN_IMPORT_BUDGET", "0"),
    ("HPU_PLUGIN_IMPORT_BUDGET", "-1"),
    ("HPU_PLUGIN_IMPORT_BUDGET", "nan"),
    ("HPU_PLUGIN_IMPORT_BUDGET", "inf"),
])
def test_bad_values_name_the_variable_and_the_fix(variable, value):
    with pytest.raises(SettingError) as caught:
        Selection.from_environ({variable: value})
    message = str(caught.value)
    assert f"{variable}={value!r}" in message
    assert any(word in message for word in ("set it", "set ", "list ", "unset"))


def test_trace_prints_each_decision_with_its_answer(site, capsys):
    """HPU_PLUGIN_TRACE=1 turns on pluggy's tracing: the hook, its arguments and the answer
    of the plugin that decided are on stderr, so a user can see who chose a backend."""
    site.add("extra", PLAIN)
    registry = _load(site, {"HPU_PLUGIN_TRACE": "1"})
    assert registry.ddp_backend("nccl") == "gloo"
    err = capsys.readouterr().err
    assert "hpu_ddp_backend [hook]" in err
    assert "hpu_plugin trace:      requested: nccl" in err  # every line says whose it is
    assert "finish hpu_ddp_backend --> gloo" in err


def test_trace_is_off_by_default_and_a_bad_value_is_refused(site, capsys):
    site.add("extra", PLAIN)
    registry = _load(site, {})
    registry.ddp_backend(None)
    assert "hpu_ddp_backend" not in capsys.readouterr().err
    with pytest.raises(SettingError, match="HPU_PLUGIN_TRACE"):
        Selection.from_environ({"HPU_PLUGIN_TRACE": "verbose"})
