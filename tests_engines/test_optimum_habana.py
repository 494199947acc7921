"""optimum-habana 1.21.2 on the emulator (the long-run command, from its own venv):
``.venv-optimum/bin/pytest tests_engines/test_optimum_habana.py -m engines_full`` after
``setup_venv .venv-optimum requirements/optimum-habana.txt``. optimum-habana pins older
Transformers and Accelerate than the project's newest, so it cannot share .venv-engines;
there these tests skip."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

from tests.e2e.conftest import run

from .conftest import HERE, emulated_env, result


def _installed() -> bool:
    try:
        return importlib.util.find_spec("optimum.habana") is not None
    except ModuleNotFoundError:  # no optimum at all
        return False


pytestmark = [
    pytest.mark.e2e, pytest.mark.engines, pytest.mark.engines_full,
    pytest.mark.skipif(not _installed(),
                       reason="optimum-habana lives in .venv-optimum "
                              "(requirements/optimum-habana.txt)"),
]


def optimum(tmp_path, part: str) -> dict:
    env = emulated_env(tmp_path, devices=1, PT_HPU_LAZY_MODE="1")
    # As in an activated venv: optimum-habana reads the bridge's version from `pip list`.
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    out = run("", env, argv=[sys.executable, str(HERE / "optimum_job.py"), str(tmp_path), part])
    return result(out.stdout)


def test_gaudi_trainer_with_fused_adamw_and_clip_norm_trains_as_the_cpu(tmp_path):
    """GaudiTrainer, lazy mode, GaudiConfig(use_fused_adam=True, use_fused_clip_norm=True)
    (the Habana model cards' settings): the bridge's FusedAdamW and FusedClipNorm, four
    steps, the losses of Transformers' Trainer with torch's AdamW and clipping on the CPU."""
    got = optimum(tmp_path, "train")
    assert got["optimizers"] == ["torch.optim.adamw.AdamW",
                                 "habana_frameworks.torch.hpex.optimizers.FusedAdamW.FusedAdamW"]
    assert got["hpu_losses"] == pytest.approx(got["cpu_losses"], abs=2e-4)  # logged to 1e-4


def test_generation_with_hpu_graphs_gives_the_cpus_tokens(tmp_path):
    """optimum-habana's generate (static shapes, lazy mode) on a model wrapped with
    ``wrap_in_hpu_graph``: captured graphs (counted as compilations) and the greedy tokens of
    Transformers' own generate on the CPU."""
    hpu = optimum(tmp_path, "generate")
    cpu = optimum(tmp_path, "cpu-generate")
    assert hpu["model"] == "GaudiGPT2LMHeadModel"
    assert hpu["compilations"] > 0
    assert hpu["tokens"] == cpu["tokens"]
