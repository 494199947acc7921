"""The guard contains what a plugin hands back, not only what it raises, in one place.

Each class of fault is held for every hook form or every hook it can reach: answers of the
wrong type deep inside (items of a dict or tuple), answers of the right type that mean
nothing the host can use, exceptions whose ``repr`` raises or runs to 100 kB, a hook that
reaches itself again through the host, a slow hook, plugins without hooks, one module under
two entry-point names and an old-style hookwrapper. Every report names the plugin, its
distribution and the ``HPU_PLUGIN_DISABLE`` value that turns it off.
"""

from __future__ import annotations

import json
import logging

import pytest

from hpu_plugin import guard
from hpu_plugin.fast_paths.decisions import buckets
from hpu_plugin.registry import Registry
from hpu_plugin.switches import Selection

HEADER = "from hpu_plugin.hookspecs import DeviceProperties, hookimpl\n\n"
FIX = "HPU_PLUGIN_DISABLE=odd-dist:odd"


#: The first-party plugins that answer ``hpu_ddp_backend`` first: turned off for a plain or
#: trylast third-party form (asked after them), so that form is asked at all.
ANSWERING = frozenset({"ddp", "gpu_migration"})
ASKED_LAST = ("plain", "trylast")


def _registry(site, form: str = "tryfirst") -> Registry:
    registry = Registry(Selection(disabled=ANSWERING if form in ASKED_LAST else frozenset()))
    registry.load_entry_points(site.entry_points())
    return registry


def _reports(caplog, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and f"plugin {name!r}" in r.getMessage()]


#: (hook signature, answer, how the registry is asked)
BAD_ANSWERS = {
    "facts_object": ("hpu_job_facts(environ)", "{'x': object()}", "facts"),
    "facts_number": ("hpu_job_facts(environ)", "{'x': 1}", "facts"),
    "facts_key": ("hpu_job_facts(environ)", "{1: 'a'}", "facts"),
    "facts_none_value": ("hpu_job_facts(environ)", "{'x': None}", "facts"),
    "facts_list": ("hpu_job_facts(environ)", "['a']", "facts"),
    "buckets_descending": ("hpu_shape_buckets(kind, limit)", "(512, 64, 8)",
                           "buckets"),
    "buckets_zero": ("hpu_shape_buckets(kind, limit)", "(0, 8)", "buckets"),
    "buckets_negative": ("hpu_shape_buckets(kind, limit)", "(-1,)", "buckets"),
    "buckets_repeated": ("hpu_shape_buckets(kind, limit)", "(8, 8)", "buckets"),
    "buckets_text": ("hpu_shape_buckets(kind, limit)", "('8',)", "buckets"),
    "buckets_float": ("hpu_shape_buckets(kind, limit)", "(1.5,)", "buckets"),
    "buckets_list": ("hpu_shape_buckets(kind, limit)", "[8, 16]", "buckets"),
    "props_count_text": ("hpu_device_properties()",
                         "DeviceProperties('hpu', '2', 0, 'GAUDI2')", "props"),
    "compile_number": ("hpu_compile_backend(requested)", "5", "compile"),
    "compile_unknown": ("hpu_compile_backend(requested)", "'bogus'", "compile"),
    "map_other_device": ("hpu_quantization_device_map(method, bits, device_map)",
                         "{'': 'cuda:0'}", "map"),
    "map_key": ("hpu_quantization_device_map(method, bits, device_map)",
                "{1: 'hpu'}", "map"),
    "available_text": ("hpu_device_available()", "'yes'", "available"),
}


def _ask(registry: Registry, how: str) -> object:
    if how == "facts":
        facts = registry.job_facts({})
        json.dumps(facts)  # what the pre-flight check does with them on every rank
        return sorted(facts)
    if how == "buckets":
        return buckets(registry, "length", None)
    if how == "props":
        registry._available = True
        return registry.device_properties()
    if how == "compile":
        return registry.compile_backend(None)
    if how == "map":
        return registry.quantization_device_map("bitsandbytes", 8, None)
    return registry.device_available()


@pytest.mark.parametrize("case", sorted(BAD_ANSWERS))
def test_a_bad_answer_is_refused_naming_the_plugin_and_the_fix(site, caplog, case):
    signature, answer, how = BAD_ANSWERS[case]
    without = _ask(_registry(site), how)  # what the first-party plugins alone answer
    site.add("odd", HEADER + f"@hookimpl(tryfirst=True)\ndef {signature}:\n    return {answer}\n",
             dist="odd-dist", version="4.2")
    registry = _registry(site)
    assert _ask(registry, how) == without  # the decision fell to the next implementation
    [report] = _reports(caplog, "odd")
    assert "odd-dist 4.2" in report and FIX in report
    record = registry.records["odd"]
    assert record.status == "faulted" and record.faults


FORMS = {
    "plain": ("", "raise {exc}"),
    "tryfirst": ("tryfirst=True", "raise {exc}"),
    "trylast": ("trylast=True", "raise {exc}"),
    "wrapper_before_yield": ("wrapper=True", "raise {exc}\n    yield"),
    "wrapper_after_yield": ("wrapper=True", "yield\n    raise {exc}"),
}
HOSTILE = {
    "repr_raises": "type('Bad', (Exception,), {'__repr__': lambda s: 1 / 0, "
                   "'__str__': lambda s: 1 / 0})()",
    "repr_huge": "ValueError('x' * 100_000)",
    "repr_not_text": "type('Odd', (Exception,), {'__repr__': lambda s: 42})()",
}


@pytest.mark.parametrize("exc", sorted(HOSTILE))
@pytest.mark.parametrize("form", list(FORMS))
def test_an_exception_that_cannot_be_shown_is_still_contained(site, caplog, form, exc):
    opts, body = FORMS[form]
    site.add("odd", HEADER + f"@hookimpl({opts})\ndef hpu_ddp_backend(requested):"
             f"\n    {body.format(exc=HOSTILE[exc])}\n", dist="odd-dist", version="4.2")
    registry = _registry(site, form)
    assert registry.ddp_backend(None) == (None if form in ASKED_LAST else "hccl")
    [report] = _reports(caplog, "odd")
    assert FIX in report and len(report) < 1500  # cut, and the fix still at its end


@pytest.mark.parametrize("exc", sorted(HOSTILE))
def test_an_exception_that_cannot_be_shown_at_import_turns_off_that_plugin_only(
        site, caplog, exc):
    site.add("odd", f"raise {HOSTILE[exc]}\n", dist="odd-dist", version="4.2")
    registry = _registry(site)
    assert registry.records["odd"].status == "failed"
    [report] = _reports(caplog, "odd")
    assert FIX in report and len(report) < 1500
    assert all(r.status == "enabled" for r in registry.records.values() if r.first_party)


REENTRY = {  # form: (options, body calling the same decision again through the registry)
    "plain": ("", "return REGISTRY[0].ddp_backend(None)"),
    "tryfirst": ("tryfirst=True", "return REGISTRY[0].ddp_backend(None)"),
    "trylast": ("trylast=True", "return REGISTRY[0].ddp_backend(None)"),
    "wrapper": ("wrapper=True", "REGISTRY[0].ddp_backend(None)\n    "
                "return (yield)"),
}


@pytest.mark.parametrize("form", list(REENTRY))
def test_a_hook_reaching_itself_again_is_skipped_inside_not_recursed(site, caplog, form):
    opts, body = REENTRY[form]
    module = site.add("odd", HEADER + f"REGISTRY = []\n\n@hookimpl({opts})\n"
                      f"def hpu_ddp_backend(requested):\n    {body}\n",
                      dist="odd-dist", version="4.2")
    registry = _registry(site, form)
    __import__(module).REGISTRY.append(registry)
    expected = None if form in ASKED_LAST else "hccl"
    assert registry.ddp_backend(None) == expected
    assert registry.ddp_backend(None) == expected
    [report] = _reports(caplog, "odd")
    assert "again from inside its own hpu_ddp_backend" in report and FIX in report


@pytest.mark.parametrize("form", ["tryfirst=True", "wrapper=True"])
def test_a_slow_hook_is_reported_by_name_not_interrupted(site, caplog, monkeypatch, form):
    monkeypatch.setattr(guard, "SLOW_HOOK", 0.05)  # the clock, not the check, is shortened
    body = ("time.sleep(0.1)\n    return 'gloo'" if form == "tryfirst=True" else
            "time.sleep(0.1)\n    return (yield)")
    site.add("odd", "import time\n" + HEADER + f"@hookimpl({form})\n"
             f"def hpu_ddp_backend(requested):\n    {body}\n",
             dist="odd-dist", version="4.2")
    registry = _registry(site)
    assert registry.ddp_backend(None) == ("gloo" if form == "tryfirst=True" else "hccl")
    [report] = _reports(caplog, "odd")
    assert "s in hpu_ddp_backend" in report and FIX in report


@pytest.mark.parametrize("count", [2, 3])
def test_healthy_plugins_without_hooks_all_register_quietly(site, caplog, count):
    for index in range(count):
        site.add(f"quiet{index}", "from hpu_plugin.hookspecs import hookimpl\n")
    registry = _registry(site)
    assert [registry.records[f"quiet{i}"].status for i in range(count)] == ["enabled"] * count
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_one_module_under_two_names_runs_once_and_says_so_once(site, caplog):
    module = site.add("odd", HEADER + "calls = []\n\n@hookimpl(tryfirst=True)\n"
                      "def hpu_ddp_backend(requested):\n"
                      "    calls.append(1)\n", dist="odd-dist", version="4.2")
    site.add("twin", "", dist="odd-dist", version="4.2", value=module)
    registry = _registry(site)
    registry.ddp_backend(None)
    assert __import__(module).calls == [1]  # its hooks run once, not twice
    [report] = _reports(caplog, "twin")
    assert "the same plugin as 'odd'" in report and not _reports(caplog, "odd")
    assert registry.records["twin"].status == "failed"
    assert registry.records["odd"].status == "enabled"
