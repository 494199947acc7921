"""``python -m peer_suites run <suite> --checkout PATH``: a library's own tests from a checkout
of its repository (its sdist ships none). The run itself is local only (CI reaches PyPI, not
GitHub); here, the argument checks and the comparison rule of such a run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # peer_suites: not installed
from peer_suites.__main__ import main
from peer_suites.compare import compare
from peer_suites.suites import SUITES


def test_a_checkout_run_compares_cpu_passes_and_counts_what_fails_on_both():
    cpu = {
        "t::hub": {"outcome": "failed"}, "t::local": {"outcome": "passed"},
        "t::broken_on_hpu": {"outcome": "passed"}, "t::import": {"outcome": "error"},
    }
    hpu = {
        "t::hub": {"outcome": "failed"}, "t::local": {"outcome": "passed"},
        "t::broken_on_hpu": {"outcome": "failed", "message": "boom"},
        "t::import": {"outcome": "error"},
    }
    summary = compare("diffusers-checkout", cpu, hpu, None, strict=False)
    assert summary.failed_both == 2
    assert [line.split(": ")[0] for line in summary.unexpected] == ["t::broken_on_hpu"]
    strict = compare("diffusers-checkout", cpu, hpu, None)
    assert len(strict.unexpected) == 3  # the curated suites: every hpu failure counts


def test_checkout_needs_one_suite_with_repository_tests(tmp_path: Path, capsys):
    assert main(["run", "accelerate", "--checkout", str(tmp_path)]) == 2
    assert "--checkout takes one suite" in capsys.readouterr().err
    assert main(["run", "diffusers", "trl", "--checkout", str(tmp_path)]) == 2


@pytest.mark.parametrize("suite", ["diffusers", "sentence-transformers", "trl"])
def test_checkout_that_is_not_the_repository_is_refused_before_any_run(
    suite: str, tmp_path: Path, capsys
):
    assert SUITES[suite].checkout_tests
    assert main(["run", suite, "--checkout", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert str(tmp_path) in error and SUITES[suite].checkout_tests[0] in error


def test_the_model_zoo_reports_a_failure_that_differs_from_the_cpus():
    cpu = {"z::no_build": {"outcome": "failed", "message": "ValueError: sizes"},
           "z::other": {"outcome": "failed", "message": "ValueError: sizes"}}
    hpu = {"z::no_build": {"outcome": "failed", "message": "ValueError: sizes"},
           "z::other": {"outcome": "failed", "message": "RuntimeError: no kernel"}}
    summary = compare("model-zoo", cpu, hpu, None,
                      strict=not SUITES["model-zoo"].same_failure_is_no_difference)
    assert summary.failed_both == 2
    assert [line.split(": ")[0] for line in summary.unexpected] == ["z::other"]


def test_the_bridge_run_counts_by_area_and_cause(tmp_path):
    from peer_suites import bridge

    outcomes = {
        "any_mode/test_a.py::test_x[1]": {"outcome": "passed", "message": ""},
        "any_mode/test_a.py::test_x[2]": {"outcome": "failed",
                                           "message": "RuntimeError: no kernel for op 12"},
        "lazy/test_b.py::test_y": {"outcome": "failed", "message": "RuntimeError: no kernel "
                                   "for op 345"},
        "test_top.py::test_z": {"outcome": "skipped", "message": "needs a device"},
    }
    areas, causes = bridge.summary(outcomes)
    assert areas["any_mode"] == {"passed": 1, "failed": 1}
    assert areas["top level"] == {"skipped": 1}
    assert causes == {"RuntimeError: no kernel for op N": 2}
    assert "| **total** | 4 | 1 | 2 | 0 | 1 | 33.3% | 0 | 33.3% |" in bridge.markdown(
        outcomes, "eager", "gaudi2")
    with pytest.raises(SystemExit):  # --checkout is required
        main(["bridge"])
    assert main(["bridge", "--checkout", str(tmp_path)]) == 2  # not a bridge checkout


def test_the_bridge_summary_keeps_failures_outside_the_claim_apart(tmp_path, monkeypatch):
    """A failure the emulator does not claim (a name it does not offer, the environment) is
    counted apart: the claimed surface's share leaves it out; a saved run is summarized
    again with --outcomes."""
    import json

    from peer_suites import bridge

    monkeypatch.setattr(bridge, "OUTSIDE_CLAIM", (
        (r"No module named 'torchvision'", "test environment: torchvision"),))
    outcomes = {
        "tests/pytest_working/any_mode/test_a.py::test_x": {"outcome": "passed", "message": ""},
        "tests/pytest_working/any_mode/test_nms.py": {
            "outcome": "error", "message": "collection: ModuleNotFoundError: No module named "
                                           "'torchvision'"},
        "tests/pytest_working/eager/test_b.py::test_y": {"outcome": "failed",
                                                        "message": "AssertionError: 1 != 2"},
    }
    areas, _ = bridge.summary(outcomes)
    assert areas["any_mode"] == {"passed": 1, "error": 1, "outside": 1}
    text = bridge.markdown(outcomes, "lazy", "gaudi2")
    assert "| any_mode | 2 | 1 | 0 | 1 | 0 | 50.0% | 1 | 100.0% |" in text
    assert "- 1: test environment: torchvision" in text
    saved = tmp_path / "bridge-lazy-gaudi2.json"
    saved.write_text(json.dumps(outcomes))
    assert main(["bridge", "--checkout", str(tmp_path), "--outcomes", str(saved)]) == 0
