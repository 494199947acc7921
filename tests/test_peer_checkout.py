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
