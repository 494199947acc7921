"""Ray on emulated Gaudi: Ray's HPU accelerator manager counts the emulated devices, the
placement Ray gives a worker (its one module, LOCAL_RANK = node-local rank) is accepted, and
Ray Train's TorchTrainer trains an unchanged Transformers Trainer with hccl."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

from tests.e2e.conftest import run

from .conftest import HERE, emulated_env, free_port, result

pytestmark = [pytest.mark.e2e, pytest.mark.engines]


def test_ray_detects_the_emulated_hpus(tmp_path):
    out = run("""
        from ray._private.accelerators.hpu import HPUAcceleratorManager as M
        print("name=", M.get_resource_name())
        print("count=", M.get_current_node_num_accelerators())
        print("variable=", M.get_visible_accelerator_ids_env_var())
    """, emulated_env(tmp_path, devices=4)).lines()
    assert out == {"name": "HPU", "count": "4", "variable": "HABANA_VISIBLE_MODULES"}


def workers(tmp_path, modules: tuple[str, str]) -> list[tuple[int, str]]:
    port = free_port()
    procs = []
    for rank, module in enumerate(modules):
        env = emulated_env(tmp_path, devices=2, HABANA_VISIBLE_MODULES=module,
                           LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2", RANK=str(rank),
                           WORLD_SIZE="2", HPU_PLUGIN_PREFLIGHT_TIMEOUT="60")
        procs.append(subprocess.Popen(
            [sys.executable, str(HERE / "ray_worker.py"), str(rank), str(port)], env=env,
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    return [(p.wait(timeout=600), p.stdout.read()) for p in procs]


def test_one_module_per_worker_is_accepted(tmp_path):
    """The issue's refusal: HABANA_VISIBLE_MODULES='1' for local rank 1 of 2."""
    for code, out in workers(tmp_path, ("0", "1")):
        assert code == 0, out[-4000:]
        got = result(out)
        assert got["sum"] == [3.0, 3.0]
        assert got["module"] == str(got["rank"])


def test_two_workers_given_the_same_module_are_refused_before_any_collective(tmp_path):
    for code, out in workers(tmp_path, ("1", "1")):
        assert code != 0
        assert "rank 1 and rank 0 would both take module 1" in out, out[-4000:]
        assert "RESULT" not in out


def run_bounded(argv: list[str], env: dict[str, str], cwd, timeout: int = 480) -> tuple[int, str]:
    """Run a launcher in its own session; on timeout end it and every process it started
    (Ray's raylet, GCS and workers), so a stuck job fails the test instead of the CI step."""
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"no end within {timeout} s:\n{out[-6000:]}")
    return proc.returncode, out


def trained(out_dir) -> list[dict]:
    """What each worker of ray_trainer_job.py wrote after training."""
    return [json.loads((out_dir / f"rank{rank}.json").read_text()) for rank in (0, 1)]


@pytest.fixture(scope="module")
def ray_fit(tmp_path_factory) -> tuple[int, str, list[dict]]:
    """One ``TorchTrainer.fit()`` of ray_trainer_job.py on a node of 2 emulated HPUs.

    Ray gets its own temp folder (short: its socket paths must fit 107 bytes; removed
    after) and a bound on Ray Train's wait for its placement group
    (RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S); the whole run is bounded by run_bounded."""
    tmp = tmp_path_factory.mktemp("ray_fit")
    out = tmp / "out"
    out.mkdir()
    ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    env = emulated_env(tmp, devices=2, RAY_TMPDIR=ray_tmp,
                       RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S="120",
                       HPU_PLUGIN_PREFLIGHT_TIMEOUT="120")
    try:
        code, output = run_bounded(
            [sys.executable, str(HERE / "ray_trainer_job.py"), str(out)], env, tmp)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    return code, output, trained(out) if code == 0 else []


def test_torch_trainer_fits_an_unchanged_transformers_trainer(ray_fit):
    """TorchTrainer(num_workers=2, resources_per_worker={"HPU": 1}, backend="hccl") with a
    Transformers Trainer as its loop: each worker on its own emulated module, hccl, and the
    two replicas equal after training."""
    code, output, ranks = ray_fit
    assert code == 0, output[-6000:]
    assert "ray found HPU: 2" in output
    assert [r["world"] for r in ranks] == [2, 2]
    assert {r["backend"] for r in ranks} == {"hccl"}
    assert {r["param_device"] for r in ranks} == {"hpu"}
    assert {r["device"] for r in ranks} == {"hpu:0"}  # the one module each worker sees
    assert sorted(r["visible"] for r in ranks) == ["0", "1"]  # Ray's placement, one each
    assert [r["local_rank"] for r in ranks] == ["0", "1"]
    assert len(ranks[0]["losses"]) == 4
    assert ranks[0]["losses"] == ranks[1]["losses"]
    assert ranks[0]["checksum"] == ranks[1]["checksum"]  # DDP kept the replicas equal


@pytest.mark.engines_full
def test_torch_trainer_trains_as_the_same_loop_under_torchrun(ray_fit, tmp_path):
    """The losses and parameters Ray Train gives are those of the same Trainer loop started
    by torchrun on the same two emulated devices."""
    code, output, ranks = ray_fit
    assert code == 0, output[-6000:]
    out = tmp_path / "out"
    out.mkdir()
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
            "2", str(HERE / "ray_trainer_job.py"), str(out), "--torchrun"]
    code, reference_output = run_bounded(argv, emulated_env(tmp_path, devices=2), tmp_path)
    assert code == 0, reference_output[-6000:]
    reference = trained(out)
    assert {r["backend"] for r in reference} == {"hccl"}
    assert ranks[0]["losses"] == pytest.approx(reference[0]["losses"], rel=1e-6)
    assert ranks[0]["checksum"] == pytest.approx(reference[0]["checksum"], rel=1e-6)
