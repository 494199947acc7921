"""The example distributions, pip-installed for real: discovered, ordered, switchable."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import NEUTRAL_CWD, clean_environ, run_python

#: The console script ``pip install`` made for this environment.
HPU_PLUGIN = Path(sys.executable).parent / "hpu-plugin"


def _listing(**environ: str) -> dict:
    """What ``hpu-plugin plugins --json`` reports, run as a user runs it."""
    done = subprocess.run([str(HPU_PLUGIN), "plugins", "--json"], env=clean_environ(**environ),
                          capture_output=True, text=True, timeout=120, cwd=NEUTRAL_CWD)
    assert done.returncode == 0, done.stderr
    listing = json.loads(done.stdout)
    assert listing["error"] == ""
    return listing


def _plugins(**environ: str) -> dict[str, dict]:
    return {plugin["name"]: plugin for plugin in _listing(**environ)["plugins"]}


def _enabled(plugins: dict[str, dict]) -> set[str]:
    return {name for name, record in plugins.items() if record["status"] == "enabled"}


def test_installed_examples_are_discovered_with_their_metadata(installed_examples):
    plugins = _plugins()
    for dist, name in installed_examples.items():
        record = plugins[name]
        assert record["distribution"] == dist and record["version"] == "0.1.0"
        assert record["status"] == "enabled" and record["first_party"] is False
    assert plugins["compile-policy"]["hooks"] == ["hpu_compile_backend"]
    assert plugins["rank-placement"]["hooks"] == ["hpu_quantization_device_map"]
    assert {"device", "compile", "ddp", "quantization"} <= _enabled(plugins)


def test_examples_take_part_where_they_ask_to(installed_examples):
    ours = {"compile-policy", "compile", "rank-placement", "quantization", "ddp"}
    # Other tests' plugins may be installed too: compare the order of ours only.
    order = {hook: [name for name in names if name in ours]
             for hook, names in _listing()["call_order"].items()}
    assert order["hpu_compile_backend"] == ["compile-policy", "compile"]  # a wrapper
    # our refusal wrapper around everything, the example's tryfirst placement, ours
    assert order["hpu_quantization_device_map"] == ["quantization", "rank-placement",
                                                    "quantization"]
    assert order["hpu_ddp_backend"] == ["ddp"]


def test_disable_switch_in_a_subprocess(installed_examples):
    plugins = _plugins(HPU_PLUGIN_DISABLE="compile-policy")
    assert plugins["compile-policy"]["status"] == "disabled"
    assert "HPU_PLUGIN_DISABLE" in plugins["compile-policy"]["reason"]
    assert plugins["rank-placement"]["status"] == "enabled"


def test_allowlist_switch_in_a_subprocess(installed_examples):
    plugins = _plugins(HPU_PLUGIN_ONLY="rank-placement,device,quantization")
    assert _enabled(plugins) == {"rank-placement", "device", "quantization"}
    assert plugins["compile-policy"]["reason"] == "not in HPU_PLUGIN_ONLY"


def test_no_third_party_switch_in_a_subprocess(installed_examples):
    plugins = _plugins(HPU_PLUGIN_NO_THIRD_PARTY="1")
    assert _enabled(plugins) == {"device", "compile", "ddp", "quantization", "shapes",
                                 "gpu_migration", "fast_paths"}
    for name in installed_examples.values():
        assert "HPU_PLUGIN_NO_THIRD_PARTY" in plugins[name]["reason"]


@pytest.mark.parametrize("variable, value", [
    ("HPU_PLUGIN_DISABLE", "1,compile-policy"),
    ("HPU_PLUGIN_ONLY", "a;b"),
    ("HPU_PLUGIN_NO_THIRD_PARTY", "sometimes"),
    ("HPU_PLUGIN_IMPORT_BUDGET", "fast"),
])
def test_bad_switch_value_never_breaks_import_torch(installed_examples, variable, value):
    # Emulation requested, so activation reaches the registry and reads the switches.
    done = run_python(
        "import torch; print(torch.ones(2).sum().item())",
        clean_environ(HPU_PLUGIN_EMULATE="1", **{variable: value}), timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2.0"
    assert f"{variable}={value!r}" in done.stderr
