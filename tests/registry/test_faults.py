"""Every kind of plugin fault is reported once (name, distribution, version, exception),
the plugin is skipped, and the decision falls to the next implementation."""

from __future__ import annotations

import logging

import pytest

from hpu_plugin.hookspecs import CHECKS, DeviceProperties
from hpu_plugin.registry import Registry
from hpu_plugin.switches import Selection

HEADER = "from hpu_plugin.hookspecs import hookimpl\n"


def _registry(eps, **selection) -> Registry:
    registry = Registry(Selection(**selection))
    registry.load_entry_points(eps)
    return registry


def _reports(caplog, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and f"plugin {name!r}" in r.getMessage()]


@pytest.mark.parametrize("body, exception", [
    ("raise RuntimeError('broken at import')", "RuntimeError('broken at import')"),
    ("import a_module_that_is_not_installed", "ModuleNotFoundError"),
    ("raise SystemExit(3)", "SystemExit(3)"),
])
def test_import_failure_is_reported_and_skipped(site, caplog, body, exception):
    site.add("broken", body, dist="broken-dist", version="2.5")
    registry = _registry(site.entry_points())
    record = registry.records["broken"]
    assert record.status == "failed" and exception in record.reason
    [report] = _reports(caplog, "broken")
    assert "broken-dist 2.5" in report and exception in report
    assert registry.ddp_backend(None) == "hccl"
    assert all(r.status == "enabled" for n, r in registry.records.items() if n != "broken")


def test_missing_attribute_in_entry_point_is_an_import_failure(site):
    site.add("noattr", HEADER, attr="Missing")
    record = _registry(site.entry_points()).records["noattr"]
    assert record.status == "failed" and "AttributeError" in record.reason


def test_slow_import_is_reported_and_not_cut_off(site, caplog):
    site.add("slow", "import time\ntime.sleep(0.5)\n" + HEADER + """
@hookimpl(tryfirst=True)
def hpu_ddp_backend(requested):
    return "gloo"
""", dist="slow-dist", version="0.1")
    registry = _registry(site.entry_points(), import_budget=0.2)
    record = registry.records["slow"]
    # measured and reported, not interrupted: an interruption could land anywhere
    assert record.import_seconds is not None and record.import_seconds >= 0.5
    [report] = _reports(caplog, "slow")
    assert "slow-dist 0.1" in report and "HPU_PLUGIN_IMPORT_BUDGET=0.2" in report
    assert "HPU_PLUGIN_DISABLE=slow-dist:slow" in report
    assert record.status == "faulted"  # loaded, but not plainly "enabled"
    assert registry.ddp_backend(None) == "gloo"


def test_within_budget_loads(site):
    site.add("quick", HEADER)
    assert _registry(site.entry_points(), import_budget=5).records["quick"].status == "enabled"


def test_raise_in_hook_is_reported_once_and_falls_through(site, caplog):
    site.add("raiser", HEADER + """
calls = []

@hookimpl(tryfirst=True)
def hpu_ddp_backend(requested):
    calls.append(requested)
    raise KeyError("no such rank")
""", dist="raiser-dist", version="3.0")
    registry = _registry(site.entry_points())
    assert registry.ddp_backend(None) == "hccl"
    assert registry.ddp_backend(None) == "hccl"
    assert __import__(site.modules[-1]).calls == [None, None]  # still asked, not silenced
    [report] = _reports(caplog, "raiser")
    assert "raiser-dist 3.0" in report and "KeyError('no such rank')" in report
    record = registry.records["raiser"]
    assert record.status == "faulted" and "KeyError" in record.reason
    assert len(record.faults) == 1


@pytest.mark.parametrize("hook, call, bad", [
    ("hpu_ddp_backend(requested)", "ddp", "42"),
    ("hpu_device_available()", "available", "'yes'"),
    ("hpu_quantization_device_map(method, bits, device_map)", "quant", "['hpu:0']"),
    ("hpu_compile_backend(requested)", "compile", "3.5"),
    ("hpu_device_properties()", "props", "DeviceProperties('hpu', '2', 0, 'GAUDI2')"),
])
def test_wrong_type_is_reported_once_and_falls_through(site, caplog, hook, call, bad):
    site.add("typo", HEADER + "from hpu_plugin.hookspecs import DeviceProperties\n"
             f"@hookimpl(tryfirst=True)\ndef {hook}:\n    return {bad}\n",
             dist="typo-dist", version="1.2")
    registry = _registry(site.entry_points())
    calls = {
        "ddp": lambda: registry.ddp_backend(None),
        "available": lambda: registry.pm.hook.hpu_device_available(),
        "quant": lambda: registry.quantization_device_map("gptq", 4, None),  # ours: no opinion
        "compile": lambda: registry.compile_backend(None),
        "props": lambda: registry.pm.hook.hpu_device_properties(),
    }
    first = calls[call]()
    assert calls[call]() == first
    assert first in ("hccl", None, "hpu_backend")  # the next implementation's answer
    [report] = _reports(caplog, "typo")
    assert "typo-dist 1.2" in report and "does not allow" in report


@pytest.mark.parametrize("call, bad, told", [
    ("ddp", "''", "a backend is a lower-case name"),
    ("ddp", "'HCCL'", "a backend is a lower-case name"),  # would skip the hccl checks
    ("quant", "{'': 'hpu:3'}", "one device, hpu:0"),
    ("quant", "{'model': 1, 'lm_head': 'cpu'}", "one device, hpu:0"),
    ("quant", "{'': 'meta'}", "not an hpu, cpu or disk device"),
])
def test_a_value_no_host_can_use_is_reported_and_falls_through(site, caplog, call, bad, told):
    """The right type, but a value that fails later in torch or the bridge, far from the
    plugin that chose it (torch's 'Unknown backend type', 'habana active device: 3 != 0')."""
    hook = {"ddp": "hpu_ddp_backend(requested)",
            "quant": "hpu_quantization_device_map(method, bits, device_map)"}[call]
    site.add("odd", HEADER + f"@hookimpl(tryfirst=True)\ndef {hook}:\n    return {bad}\n")
    registry = _registry(site.entry_points())
    if call == "ddp":
        assert registry.ddp_backend(None) == "hccl"
    else:
        assert registry.quantization_device_map("gptq", 4, None) is None
    [report] = _reports(caplog, "odd")
    assert told in report


def test_compile_backend_may_be_a_callable(site):
    site.add("fn", HEADER + """
def my_backend(gm, example_inputs):
    return gm

@hookimpl(tryfirst=True)
def hpu_compile_backend(requested):
    return my_backend
""")
    registry = _registry(site.entry_points())
    assert registry.compile_backend(None).__name__ == "my_backend"


WRAPPER_FAULTS = {
    "raise-before": "raise RuntimeError('setup')\n    yield",
    "raise-after": "yield\n    raise RuntimeError('teardown')",
    "wrong-type": "yield\n    return 7",
    "twice": "yield\n    yield",
    "no-yield": "return 'gloo'\n    yield",
}


@pytest.mark.parametrize("fault", sorted(WRAPPER_FAULTS))
def test_faulty_wrapper_becomes_a_pass_through(site, caplog, fault):
    body = WRAPPER_FAULTS[fault]
    site.add("wrapfault", HEADER + "@hookimpl(wrapper=True)\n"
             f"def hpu_ddp_backend(requested):\n    {body}\n",
             dist="wrap-dist", version="9")
    registry = _registry(site.entry_points())
    assert registry.ddp_backend(None) == "hccl"
    assert registry.ddp_backend(None) == "hccl"
    [report] = _reports(caplog, "wrapfault")
    assert "wrap-dist 9" in report


def test_unknown_hook_name_fails_the_plugin(site, caplog):
    site.add("typohook", HEADER + """
@hookimpl
def hpu_ddp_backends(requested):
    return "gloo"
""")
    record = _registry(site.entry_points()).records["typohook"]
    assert record.status == "failed" and "hpu_ddp_backends" in record.reason
    assert _reports(caplog, "typohook")


@pytest.mark.parametrize("argument, told", [
    ("world_size", "remove the parameter"),
    # pluggy refuses an argument no spec has; the reason says what to change
    ("device_type", "remove the parameter"),
])
def test_argument_the_spec_lacks_fails_the_plugin(site, caplog, argument, told):
    site.add("badarg", HEADER + f"""
@hookimpl
def hpu_ddp_backend(requested, {argument}):
    return "gloo"
""")
    registry = _registry(site.entry_points())
    record = registry.records["badarg"]
    assert record.status == "failed" and argument in record.reason and told in record.reason
    assert any(told in r.getMessage() for r in caplog.records)
    assert registry.call_order("hpu_ddp_backend") == ["gpu_migration", "ddp"]
    assert registry.ddp_backend(None) == "hccl"  # the other plugins still decide


def test_every_deciding_spec_declares_a_checked_type():
    assert set(CHECKS) == {
        "hpu_device_available", "hpu_device_properties", "hpu_compile_backend",
        "hpu_ddp_backend", "hpu_quantization_device_map", "hpu_shape_buckets", "hpu_job_facts",
        "hpu_fast_path",
    }


@pytest.mark.parametrize("hook, value, ok", [
    ("hpu_device_available", True, True),
    ("hpu_shape_buckets", (64, 128), True),
    ("hpu_shape_buckets", [64, 128], False),
    ("hpu_device_available", 1, False),
    ("hpu_ddp_backend", "hccl", True),
    ("hpu_ddp_backend", b"hccl", False),
    ("hpu_compile_backend", "eager", True),
    ("hpu_compile_backend", print, True),
    ("hpu_compile_backend", 0, False),
    ("hpu_quantization_device_map", {"": "hpu:0"}, True),
    ("hpu_quantization_device_map", "hpu", True),
    ("hpu_quantization_device_map", ("hpu",), False),
    ("hpu_device_properties", DeviceProperties("hpu", 2, 0, "GAUDI2"), True),
    ("hpu_device_properties", DeviceProperties("hpu", 2, None, "GAUDI2"), False),  # type: ignore[arg-type]
    ("hpu_device_properties", {"device_type": "hpu"}, False),
    # values hosts would place tensors and start processes by, and fail far away with
    ("hpu_device_properties", DeviceProperties("cuda", 2, 0, "GAUDI2"), False),
    ("hpu_device_properties", DeviceProperties("hpu", 2, 2, "GAUDI2"), False),
    ("hpu_device_properties", DeviceProperties("hpu", 0, 0, "GAUDI2"), False),
    ("hpu_device_properties", DeviceProperties("hpu", 2, -1, "GAUDI2"), False),
    ("hpu_job_facts", {"PT_HPU_LAZY_MODE": "0"}, True),
    ("hpu_job_facts", [("PT_HPU_LAZY_MODE", "0")], False),
])
def test_result_check_follows_the_spec(hook, value, ok):
    assert (CHECKS[hook](value, {}) is None) is ok


def test_fault_in_prepare_environment_leaves_the_others_called(site, caplog):
    site.add("envfault", HEADER + """
@hookimpl(tryfirst=True)
def hpu_prepare_environment(environ):
    environ["TOUCHED_BY_ENVFAULT"] = "1"
    raise SystemExit("exit from a hook")
""", dist="env-dist", version="4")
    registry = _registry(site.entry_points())
    environ: dict[str, str] = {}
    registry.prepare_environment(environ)
    assert environ["TOUCHED_BY_ENVFAULT"] == "1"
    assert environ["PT_ENABLE_INT64_SUPPORT"] == "1"  # the first-party defaults still ran
    [report] = _reports(caplog, "envfault")
    assert "env-dist 4" in report and "SystemExit('exit from a hook')" in report


def test_malformed_metadata_of_one_distribution_hides_no_other(site, caplog):
    site.add("good", HEADER + """
@hookimpl(tryfirst=True)
def hpu_ddp_backend(requested):
    return "gloo"
""")
    broken = site.root / "broken_meta-1.0.dist-info"
    broken.mkdir()
    (broken / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-meta\nVersion: 1.0\n")
    (broken / "entry_points.txt").write_text("[hpu_plugin]\nthis line is not an entry point\n")
    registry = _registry(site.entry_points())
    assert registry.records["good"].status == "enabled"
    assert registry.ddp_backend(None) == "gloo"
    assert any("broken_meta-1.0.dist-info" in r.getMessage() for r in caplog.records)


def test_properties_are_not_run_when_looking_for_hooks(site):
    site.add("lazy", HEADER + """
class Plugin:
    @property
    def expensive(self):
        raise AssertionError("a property was evaluated")

    @hookimpl(tryfirst=True)
    def hpu_ddp_backend(self, requested):
        return "gloo"

plugin = Plugin()
""", attr="plugin")
    registry = _registry(site.entry_points())
    assert registry.records["lazy"].status == "enabled"
    assert registry.ddp_backend(None) == "gloo"
