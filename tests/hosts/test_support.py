"""Supported versions: the classifier, and what ``hpu-plugin info`` / ``doctor`` say about the
installed hosts and the adapters that stayed out.

These tests run on every matrix entry (noxfile.py runs tests/hosts), so on each one the
installed releases must be the tested ones and every adapter must install. That the
matrix files, the package, the README and the recorded results agree is tests/matrix.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from importlib import metadata

import pytest

from hpu_plugin import patching
from hpu_plugin.diagnostics import host_releases as support
from hpu_plugin.hosts import transformers_adapter
from hpu_plugin.patching import Patches

# -- the classifier, on fabricated version strings ---------------------------------------------


@pytest.mark.parametrize(
    ("host", "version", "standing"),
    [
        ("transformers", "4.51.3", support.TESTED),
        ("transformers", "4.57.6", support.TESTED),
        ("transformers", "5.24.0", support.TESTED),
        ("transformers", "4.55.4", support.TESTED),  # the hosts of Gaudi software 1.23
        ("transformers", "4.56.0", support.UNTESTED),
        ("transformers", "5.0.0", support.UNTESTED),
        ("transformers", "5.0.0rc1", support.UNTESTED),
        ("transformers", "4.51.0", support.OUT_OF_RANGE),  # below the oldest tested
        ("transformers", "4.51.3rc1", support.OUT_OF_RANGE),  # before the oldest tested
        ("transformers", "4.46.3", support.OUT_OF_RANGE),
        ("transformers", "5.25.0", support.OUT_OF_RANGE),
        ("transformers", "5.25.0.dev0", support.OUT_OF_RANGE),
        ("transformers", "5.24.0.post1", support.OUT_OF_RANGE),  # after the newest tested
        ("transformers", "6.0", support.OUT_OF_RANGE),
        ("accelerate", "1.5", support.TESTED),  # trailing zeros do not count
        ("accelerate", "1.10.1", support.TESTED),
        ("accelerate", "1.12.0", support.UNTESTED),
        ("accelerate", "1.4.0", support.OUT_OF_RANGE),
        ("accelerate", "1.16.0", support.OUT_OF_RANGE),
        ("torch", "2.13.0+cpu", support.TESTED),  # a build of a tested release
        ("torch", "2.14.1+cu130", support.OUT_OF_RANGE),  # no CPU build of it was tested
        ("torch", "2.11.0+cu130", support.TESTED),  # the torch of Gaudi software 1.24.1
        ("torch", "2.9.0", support.TESTED),
        ("torch", "2.10.0", support.TESTED),  # the torch of Gaudi software 1.24.0
        ("torch", "2.10.1", support.UNTESTED),
        ("torch", "2.12.1", support.UNTESTED),
        ("torch", "2.8.0", support.OUT_OF_RANGE),  # older than any Gaudi release tested
        ("torch", "2.15.0.dev20260101+cpu", support.OUT_OF_RANGE),
        ("torch", "not-a-version", support.UNREADABLE),
        ("torch", None, support.NOT_INSTALLED),
    ],
)
def test_classify_fabricated_versions(host, version, standing):
    assert support.classify(host, version).standing == standing


def test_untested_names_the_nearest_tested_releases():
    message = support.classify("transformers", "4.56.2").message
    assert "4.55.4 and 4.57.6" in message
    message = support.classify("torch", "2.12.0").message
    assert "2.11.0 and 2.13.0" in message
    message = support.classify("accelerate", "1.9.0").message  # 1.9 < 1.10 numerically
    assert "1.5.0 and 1.10.1" in message


def test_out_of_range_says_which_side_and_whether_the_host_has_hpu_code():
    old = support.classify("transformers", "4.49.0").message
    assert "older than 4.51.3" in old and "no HPU code" in old
    new = support.classify("accelerate", "1.16.0").message
    assert "newer than 1.15.0" in new and "no HPU code" not in new


def test_unknown_host_is_refused():
    with pytest.raises(ValueError, match="unknown host 'peft'"):
        support.classify("peft", "0.1")


def test_combination_names_the_matrix_entry_or_lists_the_tested_pairs():
    newest = {"torch": "2.13.0", "transformers": "5.24", "accelerate": "1.15.0"}
    assert support.combination(newest)["entry"] == "newest"
    mixed = {"torch": "2.13.0", "transformers": "4.51.3", "accelerate": "1.10.1"}
    result = support.combination(mixed)
    assert result["entry"] is None
    assert "transformers 4.51.3 + accelerate 1.5.0 on torch 2.13.0" in result["message"]


def test_doctor_findings_for_fabricated_versions():
    versions = {"torch": "2.13.0", "transformers": "4.56.0", "accelerate": "1.4.0"}
    found = {f.check: f for f in support.findings(support.report(versions, probe=False))}
    assert found["torch"].severity == "ok"
    assert found["transformers"].severity == "info"
    assert found["accelerate"].severity == "warning"
    assert "1.5.0, 1.10.1 and 1.15.0" in found["accelerate"].fix


# -- on this matrix entry ------------------------------------------------------------------------


def test_the_installed_releases_are_a_tested_combination():
    """Run by every matrix entry: what it installed is what MATRIX says it tests."""
    versions = {host: support.installed_version(host) for host in support.HOSTS}
    standings = support.standings()
    assert {h: s.standing for h, s in standings.items()} == dict.fromkeys(
        support.HOSTS, support.TESTED
    ), versions
    assert support.combination(versions)["entry"] is not None
    assert standings["torch"].version == metadata.version("torch")


# -- adapters that stayed out ------------------------------------------------------------------


def test_every_adapter_installs_on_this_tested_release(installed):
    result = support.probe_adapters()
    assert result["installed"] is True
    assert result["stayed_out"] == {}
    assert "transformers.training_args" in result["imported"] or (
        "transformers.training_args" in sys.modules
    )
    assert support.report_lines(support.report())[-1] == (
        "Host adapters: every adapter is installed"
    )


def test_an_adapter_that_stays_out_is_reported_with_its_reason(installed):
    registry = installed
    host_without = types.ModuleType("transformers.training_args")  # no TrainingArguments
    transformers_adapter.install_training_args(registry, Patches(), host_without)
    result = support.report()
    reason = result["adapters"]["stayed_out"]["transformers TrainingArguments"]
    assert "has no TrainingArguments.torch_compile_backend" in reason
    assert reason.startswith(f"transformers {metadata.version('transformers')} ")
    lines = support.report_lines(result)
    assert "Host adapters that stayed out:" in lines
    warnings = [f for f in support.findings(result) if f.check == "adapters"]
    assert len(warnings) == 1 and warnings[0].severity == "warning"
    assert "TrainingArguments" in warnings[0].message


def test_uninstall_forgets_what_stayed_out(installed):
    patching.record_out("transformers", "pipeline", "test")
    from hpu_plugin import hosts

    hosts.uninstall()
    assert patching.this_process.stayed_out == {}


@pytest.mark.e2e
@pytest.mark.parametrize("command", ["info", "doctor"])
def test_info_and_doctor_on_the_emulator_say_tested_and_every_adapter_in(command, tmp_path):
    done = subprocess.run(  # tests/conftest.py took the shell's Gaudi settings out
        [sys.executable, "-m", "hpu_plugin", command, "--json"],
        env={**os.environ, "HPU_PLUGIN_EMULATE": "1"}, cwd=tmp_path,
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    if command == "info":
        report = result["support"]
        assert {h: s["standing"] for h, s in report["hosts"].items()} == dict.fromkeys(
            support.HOSTS, support.TESTED
        )
        assert report["adapters"]["installed"] is True
        assert report["adapters"]["stayed_out"] == {}
        assert report["combination"]["entry"] is not None
    else:
        checks = {f["check"]: f for f in result["findings"]}
        for host in support.HOSTS:
            assert checks[host]["severity"] == "ok", checks[host]
        assert "adapters" not in checks


def test_info_and_doctor_know_the_libraries_optimum_habana_covered(monkeypatch):
    s = support

    pinned = {"peft": "0.21.2", "sentence-transformers": "6.2.0", "trl": "1.16.0",
              "diffusers": "0.42.1"}
    monkeypatch.setattr(s, "installed_version", lambda name: pinned.get(name))
    libraries = s.library_standings()
    assert set(libraries) == set(pinned)
    assert {lib["standing"] for lib in libraries.values()} == {s.TESTED}
    result = {"hosts": {}, "combination": {"message": ""}, "libraries": libraries,
              "adapters": None}
    lines = "\n".join(s.report_lines(result))
    assert "sentence-transformers  6.2.0" in lines and "one Gaudi per pool worker" in lines
    assert not s.findings(result)
    versions = {"sentence-transformers": "6.3.0", "trl": "1.16.0"}
    monkeypatch.setattr(s, "installed_version", lambda name: versions.get(name))
    moved = s.library_standings()
    assert moved["sentence-transformers"]["standing"] == "untested"
    assert moved["diffusers"]["standing"] == s.NOT_INSTALLED
    found = s.findings({**result, "libraries": moved})
    assert [(f.check, f.severity) for f in found] == [("sentence-transformers", "warning")]
    assert "install sentence-transformers==6.2.0" in found[0].fix


def test_the_libraries_tested_releases_are_the_pins():
    """requirements/test.txt installs exactly the releases support.py calls tested."""
    import re
    from pathlib import Path

    from hpu_plugin.hosts import support as s

    pins = Path(__file__).resolve().parents[2] / "requirements" / "test.txt"
    text = pins.read_text(encoding="utf-8")
    for name, tested in s.LIBRARIES_TESTED.items():
        found = re.search(rf"^{re.escape(name)}==(\S+)", text, re.MULTILINE)
        assert found is not None and found.group(1) == tested[-1], name
