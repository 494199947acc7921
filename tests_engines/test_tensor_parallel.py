"""Tensor and expert parallelism with Transformers' own plans on 4 and 8 emulated Gaudi, and
``accelerate launch`` with Accelerate's parallelism config (tests/e2e/test_tensor_parallel.py
runs 2 and 4 cards in the main suite). Each job is the user's code of
tests/e2e/tensor_parallel_job.py, compared with the same code on one device: the same greedy
tokens, the same losses, and each rank holding its share of the weights."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, emulated_env, results

pytestmark = [pytest.mark.e2e, pytest.mark.engines]
transformers = pytest.importorskip("transformers")
if int(transformers.__version__.split(".")[0]) < 5:
    pytest.skip("Transformers 5's distributed API", allow_module_level=True)

JOB = ROOT / "tests" / "e2e" / "tensor_parallel_job.py"
#: The same fp32 math split over cards: reductions in another order (measured: identical on
#: the emulator for these sizes).
TOLERANCE = {"rel": 1e-4, "abs": 1e-5}


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> list[dict]:
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=1800)
    found = results(done.stdout)
    assert done.returncode == 0 and found, done.stdout[-3000:] + done.stderr[-6000:]
    return found


def _model(tmp_path_factory: pytest.TempPathFactory, kind: str) -> tuple[Path, dict]:
    """A tiny model from a config, and the job's result on one emulated device."""
    folder = tmp_path_factory.mktemp(kind)
    path = folder / "model"
    subprocess.run([sys.executable, str(JOB), str(path), f"make-{kind}"], check=True,
                   env=emulated_env(folder), capture_output=True, timeout=600)
    (single,) = _run([sys.executable, str(JOB), str(path), "single"], emulated_env(folder),
                     folder)
    return path, single


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> tuple[Path, dict]:
    return _model(tmp_path_factory, "llama")


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory) -> tuple[Path, dict]:
    return _model(tmp_path_factory, "mixtral")


def torchrun(tmp_path: Path, model: Path, api: str, ranks: int) -> list[dict]:
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
            str(ranks), str(JOB), str(model), api]
    return _run(argv, emulated_env(tmp_path, devices=ranks), tmp_path)


def accelerate_launch(tmp_path: Path, model: Path, api: str, ranks: int,
                      *options: str) -> list[dict]:
    env = emulated_env(tmp_path, devices=ranks)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    argv = [os.path.join(os.path.dirname(sys.executable), "accelerate"), "launch",
            "--num_processes", str(ranks), *options, str(JOB), str(model), api]
    return _run(argv, env, tmp_path)


def assert_same(found: list[dict], single: dict, ranks: int, shares: int | None = None) -> None:
    """Every rank: one device's tokens and losses, on hpu:0, holding 1/``shares`` of the
    weights (all ranks split them unless said otherwise)."""
    assert sorted(r["rank"] for r in found) == [str(i) for i in range(ranks)]
    for rank in found:
        assert rank["device"] == "hpu:0"
        assert rank["held"] * (shares or ranks) == single["held"]
        if rank["tokens"] is not None:
            assert rank["tokens"] == single["tokens"]
        assert rank["losses"] == pytest.approx(single["losses"], **TOLERANCE)


def test_experts_split_between_two_cards_equal_one_device(tmp_path, mixtral):
    """``DistributedConfig(tp_size=2, ep_size=2)`` on a Mixtral: each card holds 2 of the 4
    experts, the dense layers split as tensor parallel."""
    model, single = mixtral
    assert_same(torchrun(tmp_path, model, "ep", 2), single, 2)


@pytest.mark.engines_full
@pytest.mark.parametrize(("api", "ranks"), [("ep", 4), ("ep_all_to_all", 4)])
def test_experts_split_between_four_cards_equal_one_device(tmp_path, mixtral, api, ranks):
    model, single = mixtral
    found = torchrun(tmp_path, model, api, ranks)
    assert_same(found, single, ranks)
    if api == "ep_all_to_all":  # the tokens went to their experts' card
        assert all(r["collectives"].get("all_to_all_single", 0) > 0 for r in found), found


@pytest.mark.engines_full
@pytest.mark.parametrize(("api", "ranks"), [
    ("tp_plan", 4), ("mesh", 4), ("tp_plan", 8), ("config", 8), ("mesh", 8), ("2d", 8)])
def test_tensor_parallel_on_four_and_eight_cards_equals_one_device(tmp_path, llama, api, ranks):
    model, single = llama
    assert_same(torchrun(tmp_path, model, api, ranks), single, ranks)


@pytest.mark.engines_full
def test_accelerate_launch_with_a_tensor_parallel_config_equals_one_device(tmp_path, llama):
    """``accelerate launch --num_processes 4`` of a script building
    ``Accelerator(parallelism_config=ParallelismConfig(tp_size=4))``: MULTI_HPU, each card a
    quarter of every projection."""
    model, single = llama
    found = accelerate_launch(tmp_path, model, "accelerate", 4)
    assert_same(found, single, 4)
    # each card steps its shards with Gaudi's fused AdamW: one kernel a step (one group)
    assert [rank["optimizer_kernels"] for rank in found] == [[1] * 3] * 4, found


@pytest.mark.engines_full
def test_accelerate_launch_with_a_fully_sharded_config_equals_one_device(tmp_path, llama):
    """``accelerate launch --use_parallelism_config --parallelism_config_dp_shard_size 4``
    (FSDP 2): each card holds a quarter of every weight after ``prepare``."""
    model, single = llama
    found = accelerate_launch(
        tmp_path, model, "accelerate_launch", 4, "--use_fsdp", "--fsdp_version", "2",
        "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP",
        "--fsdp_transformer_layer_cls_to_wrap", "LlamaDecoderLayer",
        "--use_parallelism_config", "--parallelism_config_dp_shard_size", "4")
    assert_same(found, single, 4)
    assert [rank["optimizer_kernels"] for rank in found] == [[1] * 3] * 4, found
