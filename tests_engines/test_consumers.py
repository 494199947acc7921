"""Code written for Gaudi by others, run unchanged on the emulator: the path each takes on
Gaudi (HPU graphs, lazy mode, the bridge's fused kernels), checked against the CPU."""

from __future__ import annotations

import sys

import pytest

from tests.e2e.conftest import run

from .conftest import HERE, emulated_env, result

pytestmark = [pytest.mark.e2e, pytest.mark.engines]

#: The same float32 math on the same weights, padded to the bridge's buckets on hpu.
EMBEDDING_TOLERANCE = 1e-5


def flat(rows: list[list[float]]) -> list[float]:
    return [value for row in rows for value in row]


def test_sentence_transformers_encode_takes_its_hpu_graph_path(tmp_path):
    """sentence-transformers wraps the model in HPU graphs when the bridge has
    ``wrap_in_hpu_graph`` (sentence_transformer/model.py ``_inference``): the first encode
    captures (the emulator counts graph compilations as the bridge does), the second replays
    what was captured, and both give the CPU's embeddings. Lazy mode, the bridge's default:
    only there does it offer ``wrap_in_hpu_graph``."""
    out = run("", emulated_env(tmp_path, devices=1, PT_HPU_LAZY_MODE="1"),
              argv=[sys.executable, str(HERE / "sentence_job.py"), str(tmp_path)])
    got = result(out.stdout)
    assert got["device"] == "hpu:0" and got["graphs"] is True
    captured, replayed = got["compilations"]
    assert captured > 0 and replayed == 0, got["compilations"]
    cpu = flat(got["cpu"])
    assert flat(got["hpu"]) == pytest.approx(cpu, abs=EMBEDDING_TOLERANCE)
    assert flat(got["again"]) == pytest.approx(cpu, abs=EMBEDDING_TOLERANCE)


def test_lightning_habana_trainer_fits_on_hpu(tmp_path):
    """lightning-habana 1.6.0 as its README says (``Trainer(accelerator=HPUAccelerator(),
    devices=1)``, its SingleHPUStrategy, which marks steps in lazy mode, the bridge's
    default) fits 8 steps, to the CPU's weights. Only Habana's dataloader and media-loader
    imports are stubbed (see the job)."""
    out = run("", emulated_env(tmp_path, devices=1, PT_HPU_LAZY_MODE="1"),
              argv=[sys.executable, str(HERE / "lightning_job.py")])
    got = result(out.stdout)
    assert got["accelerator"] == "lightning_habana.pytorch.accelerator.HPUAccelerator"
    assert got["strategy"] == "SingleHPUStrategy" and got["steps"] == 8
    assert got["root_device"] == "hpu"
    assert got["hpu"] == pytest.approx(got["cpu"], abs=1e-5)
