"""Transformers' tensor parallelism across emulated Gaudi cards, as users launch it.

A Gaudi process drives one device, ``hpu:0``; Transformers 5 binds each rank to device
``LOCAL_RANK``, which the bridge refuses on every rank but the first. These run the user's
own ``tp_plan="auto"``, ``DistributedConfig``, ``init_device_mesh`` and Accelerate
``ParallelismConfig`` code (``tensor_parallel_job.py``) under ``torchrun`` on 2 and 4 cards
and compare with one process; 8 cards, expert parallelism and ``accelerate launch`` are in
tests_engines/test_tensor_parallel.py.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from .conftest import base_env, emulated_env, run

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("emulator")]
transformers = pytest.importorskip("transformers")
if int(transformers.__version__.split(".")[0]) < 5:
    pytest.skip("Transformers 4 binds a tensor-parallel rank with torch.hpu.set_device, which "
                "the bridge maps to the process's device itself", allow_module_level=True)

#: The user's job (greedy tokens, three AdamW steps' losses, its share of the weights).
JOB = Path(__file__).parent / "tensor_parallel_job.py"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tp") / "model"
    run("", base_env(path.parent), argv=[sys.executable, str(JOB), str(path), "make-llama"])
    return path


def _results(stdout: str) -> list[dict]:
    """Each rank's report; ranks share the pipe, so two may share a line."""
    decoder = json.JSONDecoder()
    return [decoder.raw_decode(stdout, m.end())[0] for m in re.finditer("RESULT ", stdout)]


@pytest.fixture(scope="module")
def single(tmp_path_factory, model_dir) -> dict:
    """The same user code in one process on one emulated Gaudi."""
    tmp_path = tmp_path_factory.mktemp("single")
    result = run("", emulated_env(tmp_path),
                 argv=[sys.executable, str(JOB), str(model_dir), "single"])
    (found,) = _results(result.stdout)
    return found


def _torchrun(tmp_path: Path, model_dir: Path, api: str, ranks: int,
              **extra: str) -> list[dict]:
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
            str(ranks), str(JOB), str(model_dir), api]
    result = run("", emulated_env(tmp_path, devices=ranks, **extra), argv=argv, cwd=tmp_path,
                 check=False)
    found = _results(result.stdout)
    assert sorted(r["rank"] for r in found) == [str(i) for i in range(ranks)], (
        result.stdout[-3000:] + result.stderr[-3000:])
    return found


def _assert_same(found: list[dict], single: dict) -> None:
    for rank in found:
        assert rank["held"] * len(found) == single["held"]  # each rank holds its share
        assert rank["device"] == "hpu:0"  # the one device each Gaudi process drives
        if rank["tokens"] is not None:
            assert rank["tokens"] == single["tokens"]
        assert rank["losses"] == pytest.approx(single["losses"], rel=1e-4, abs=1e-5)


@pytest.mark.parametrize(
    ("api", "ranks"),
    [("tp_plan", 2), ("mesh", 2), ("accelerate", 2), ("config", 4), ("2d", 4)])
def test_tensor_parallel_across_gaudi_equals_one_device(tmp_path, model_dir, single, api,
                                                         ranks):
    found = _torchrun(tmp_path, model_dir, api, ranks)
    _assert_same(found, single)
    # Accelerate's prepare gives the optimizer Gaudi's fused AdamW (one group: one kernel a
    # step), which steps each card's shards; the plain loops keep torch's step
    assert [rank["optimizer_kernels"] for rank in found] == [
        [1] * 3 if api == "accelerate" else [0] * 3] * ranks, found


def test_tensor_parallel_in_lazy_mode_equals_one_device(tmp_path, model_dir, single):
    """Lazy mode (optimum-habana's): ``generate()`` of a tensor-parallel model stays out of
    HPU graphs, whose capture the bridge refuses collectives in, and decodes as one card."""
    found = _torchrun(tmp_path, model_dir, "tp_plan", 2, PT_HPU_LAZY_MODE="1")
    _assert_same(found, single)
    assert all(rank["tokens"] is not None for rank in found)


HINT = "hpu_plugin: a Gaudi process drives one device, always hpu:0"


def test_a_users_own_binding_to_another_index_keeps_the_bridges_error(tmp_path):
    """Only Transformers' set-up is bound to hpu:0: the user's own call to index 1 (a
    device selection, or a model moved there) is refused by the device guard as on Gaudi,
    with the plugin's hint under it."""
    result = run(f"""
        import torch
        from transformers.distributed import utils
        print("bound=" + str(utils._bind_local_device("hpu", 1)))
        for name, call in (("select", lambda: torch.accelerator.set_device_index(1)),
                           ("model", lambda: torch.nn.Linear(2, 2).to("hpu:1"))):
            try:
                call()
            except RuntimeError as exc:
                notes = "".join(getattr(exc, "__notes__", ()))
                print(name + "=" + str(str(exc).startswith("habana active device: 1 != 0")
                                       and {HINT!r} in notes))
    """, emulated_env(tmp_path, devices=2))
    assert result.lines()["bound"] == "hpu:0"
    assert result.lines()["select"] == result.lines()["model"] == "True"


#: A script written for GPUs: each rank selects device LOCAL_RANK, then builds a mesh.
MESH_OF_THREE = """
import os, torch
from torch.distributed.device_mesh import init_device_mesh
try:
    torch.accelerator.set_device_index(int(os.environ["LOCAL_RANK"]))
    print("selected", flush=True)
except RuntimeError as exc:
    print("refused hint=%s" % (HINT in "".join(getattr(exc, "__notes__", ()))), flush=True)
init_device_mesh("hpu", (3,), mesh_dim_names=("tp",))
print("MESH BUILT", flush=True)
"""


def test_a_mesh_of_three_cards_is_refused_before_its_process_group_starts(tmp_path):
    """Gaudi runs groups of 2 or 4 devices or the whole server: each of the 3 ranks stops
    in ``init_device_mesh`` with the mesh's sizes and the fix, before any collective. On the
    way, ranks 1 and 2 select device LOCAL_RANK as GPU code does, and are refused by the
    device guard with the hint."""
    script = tmp_path / "mesh.py"
    script.write_text(f"HINT = {HINT!r}\n" + MESH_OF_THREE)
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
            "3", str(script)]
    result = run("", emulated_env(tmp_path, devices=4), argv=argv, cwd=tmp_path, check=False)
    assert result.returncode != 0
    assert "MESH BUILT" not in result.stdout
    assert result.stdout.count("refused hint=True") == 2, result.stdout[-3000:]
    assert result.stdout.count("selected") == 1
    refusal = "PlacementError: device mesh='tp=3': it spans 3 of this node's 3 devices"
    assert result.stderr.count(refusal) >= 1, result.stderr[-3000:]
    assert "tp_size=4 with torchrun --nproc-per-node 4" in result.stderr
