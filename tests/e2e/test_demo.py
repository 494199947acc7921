"""The README's main demonstration runs, on the emulator, as the README says."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .conftest import emulated_env, run

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("emulator")]

DEMO = Path(__file__).parents[2] / "examples" / "reference_page.py"


def test_reference_page_demo_runs_every_section_on_hpu(tmp_path):
    out = run("", emulated_env(tmp_path), argv=[sys.executable, str(DEMO)], cwd=tmp_path).stdout
    assert "is_torch_hpu_available(): True" in out
    assert "index, module_id" in out  # hl-smi answered, as the real tool prints
    assert "model.device: hpu:0" in out
    assert "pipeline device: hpu:0" in out
    assert "training_args.device: hpu:0" in out
    assert "torch_compile_backend: hpu_backend" in out
    assert "compiled train loss:" in out
