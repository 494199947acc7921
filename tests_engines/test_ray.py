"""Ray on emulated Gaudi: Ray's HPU accelerator manager counts the emulated devices, the
placement Ray gives a worker (its one module, LOCAL_RANK = node-local rank) is accepted, and
Ray Train's TorchTrainer trains an unchanged Transformers Trainer with hccl."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.e2e.conftest import run

from .conftest import HERE, emulated_env, free_port, result, two_nodes

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
    """What each worker of ray_trainer_job.py wrote after training, in rank order."""
    ranks = [json.loads(p.read_text()) for p in out_dir.glob("rank*.json")]
    return sorted(ranks, key=lambda r: r["rank"])


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


def test_prepare_model_wraps_a_plain_loop_in_ddp_on_the_hpu(ray_fit):
    """Ray Train's ``prepare_model`` moves the model to ``get_device()`` (``hpu``, Ray's HPU
    device manager's answer) and wraps it in DDP, which keeps the replicas equal."""
    code, output, ranks = ray_fit
    assert code == 0, output[-6000:]
    plain = [r["plain"] for r in ranks]
    assert [p["wrapped"] for p in plain] == ["DistributedDataParallel"] * 2
    assert {p["device"] for p in plain} == {"hpu"}
    assert {p["param_device"] for p in plain} == {"hpu:0"}
    assert plain[0]["checksum"] == plain[1]["checksum"]


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


# --- Two Ray nodes -----------------------------------------------------------------------
# A cluster as a platform team builds one: `ray start --head` on one server, `ray start
# --address` on the other, each node's Ray started inside that server's environment. Here
# both are emulated servers of 2 devices on this machine: node 0 has modules 0,1; node 1 is
# a pod that Kubernetes' Gaudi device plugin gave modules 4,5 (HABANA_VISIBLE_MODULES=4,5).
# Ray Train tells nodes apart by IP (local ranks, NODE_RANK), so each node gets its own
# loopback address, as two servers have their own addresses.

NODE_IPS = ("127.0.0.1", "127.0.0.2")
NODE_0 = {"HPU_PLUGIN_EMULATE_MODULES": "0,1"}
NODE_1 = {"HPU_PLUGIN_EMULATE_MODULES": "4,5", "HABANA_VISIBLE_MODULES": "4,5"}


def _die_with_pytest() -> None:
    """In the ``ray start`` child: SIGTERM when pytest dies, even by SIGKILL (Linux)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _ray_start(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    """One node's ``ray start ... --block``, in its own session so that ending it ends the
    node's raylet and workers with it; what it prints goes to ``cwd/ray_start.log``."""
    ray = str(Path(sys.executable).parent / "ray")
    with open(cwd / "ray_start.log", "w") as log:
        return subprocess.Popen([ray, "start", *args, "--block", "--disable-usage-stats"],
                                env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_die_with_pytest)


def _wait_for_head(port: int, head: subprocess.Popen[str], log: Path, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if head.poll() is not None:
            pytest.fail(f"ray start --head ended ({head.returncode}):\n{log.read_text()[-4000:]}")
        with socket.socket() as s:
            if s.connect_ex((NODE_IPS[0], port)) == 0:
                return
        time.sleep(0.5)
    pytest.fail(f"Ray's head did not listen on port {port} within {seconds:g} s:\n"
                f"{log.read_text()[-4000:]}")


def _stop(process: subprocess.Popen[str]) -> None:
    """SIGTERM lets ``ray start`` end the processes it knows; then SIGKILL whatever is left
    in the node's session (a worker stuck in a collective), so no node outlives its test."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=10)


@contextmanager
def ray_cluster(tmp_path, node1: dict[str, str]) -> Iterator[tuple[str, dict[str, str]]]:
    """Two Ray nodes on two emulated servers; yields the head's address and the driver's
    environment. Token authentication (Ray's default for ``ray start``) with a token of
    this cluster's own, so nothing is read from or written to ``~/.ray``."""
    ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # socket paths must fit 107 bytes
    common = {"RAY_TMPDIR": ray_tmp, "RAY_AUTH_MODE": "token",
              "RAY_AUTH_TOKEN": secrets.token_hex(32), "HPU_PLUGIN_PREFLIGHT_TIMEOUT": "120",
              "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": "120"}
    port = free_port()
    folders = [tmp_path / "node0", tmp_path / "node1"]
    for folder in folders:
        folder.mkdir()
    sized = ["--num-cpus", "1", "--object-store-memory", str(80 * 1024 * 1024)]
    # The dashboard agent's port is fixed by default (52365): one of this cluster's own, so
    # that two runs on one machine do not meet. (Ray Client's fixed 10001 is not started:
    # it needs ray[client], which ray[train] does not install.)
    agent = "--dashboard-agent-listen-port"
    head = _ray_start(["--head", "--port", str(port), "--node-ip-address", NODE_IPS[0],
                       "--include-dashboard", "false", "--temp-dir", ray_tmp,
                       agent, str(free_port()), *sized],
                      emulated_env(folders[0], devices=2, **common, **NODE_0), folders[0])
    nodes = [head]
    try:
        _wait_for_head(port, head, folders[0] / "ray_start.log")
        nodes.append(_ray_start(
            ["--address", f"{NODE_IPS[0]}:{port}", "--node-ip-address", NODE_IPS[1], agent,
             str(free_port()), *sized],
            emulated_env(folders[1], devices=2, **common, **node1), folders[1]))
        yield f"{NODE_IPS[0]}:{port}", emulated_env(tmp_path, devices=2, **common)
    finally:
        for node in reversed(nodes):
            _stop(node)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def fit_on_two_nodes(tmp_path, node1: dict[str, str],
                     timeout: int = 480) -> tuple[int, str, list[dict]]:
    """``TorchTrainer.fit()`` of ray_trainer_job.py, 4 workers of one HPU each, on a
    two-node cluster whose node 1 runs in ``node1``'s environment."""
    out = tmp_path / "out"
    out.mkdir()
    with ray_cluster(tmp_path, node1) as (address, env):
        code, output = run_bounded(
            [sys.executable, str(HERE / "ray_trainer_job.py"), str(out), "--address", address,
             "--workers", "4"], env, tmp_path, timeout=timeout)
    (tmp_path / "driver.log").write_text(output)  # the whole output, for a failure's reader
    return code, output, trained(out) if code == 0 else []


@pytest.fixture(scope="module")
def two_node_fit(tmp_path_factory) -> tuple[int, str, list[dict]]:
    return fit_on_two_nodes(tmp_path_factory.mktemp("ray_two_nodes"), NODE_1)


def test_torch_trainer_spans_two_ray_nodes_each_on_its_own_server(two_node_fit):
    """Ray counts each node's emulated HPUs; Ray Train places 2 workers a node, one module
    each, local ranks per node; hccl across the nodes keeps the 4 replicas equal."""
    code, output, ranks = two_node_fit
    assert code == 0, output[-6000:]
    assert "ray found HPU: 4 on 2 node(s): [2.0, 2.0]" in output
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert {r["backend"] for r in ranks} == {"hccl"}
    assert {r["world"] for r in ranks} == {4}
    assert {(r["param_device"], r["device"]) for r in ranks} == {("hpu", "hpu:0")}
    nodes: dict[str, list[dict]] = {}
    for r in ranks:  # Ray numbers the nodes (NODE_RANK) in its own order
        nodes.setdefault(r["node_rank"], []).append(r)
    assert sorted(nodes) == ["0", "1"]
    servers = []
    for members in nodes.values():
        (server,) = {m["server"] for m in members}  # a node's workers run on its server
        servers.append(server)
        # Ray's placement: one module each, from the node's own; local ranks per node
        assert sorted(m["visible"] for m in members) == server.split(",")
        assert sorted((m["local_rank"], m["local_world"]) for m in members) == [
            ("0", "2"), ("1", "2")]
    assert sorted(servers) == ["0,1", "4,5"]
    assert len(ranks[0]["losses"]) == 4
    assert len({json.dumps(r["losses"]) for r in ranks}) == 1
    assert len({r["checksum"] for r in ranks}) == 1  # DDP kept every replica equal


def test_a_ray_node_that_differs_stops_the_fit_naming_it(tmp_path):
    """Node 1's server runs with int64 support off: the pre-flight check stops every worker
    before the first collective, and ``fit()`` ends with the message, not a hang."""
    code, output, _ = fit_on_two_nodes(tmp_path, {**NODE_1, "PT_ENABLE_INT64_SUPPORT": "0"},
                                       timeout=300)
    assert code != 0
    # Ray Train 2.60 reports a failure in the process group's set-up as its ControllerError
    assert "fit raised ControllerError" in output, output[-6000:]
    assert "RayTaskError(PreflightError)" in output
    # Ray chooses which node is node rank 0, so either server may be the reference
    found = re.search(r"PreflightError: PT_ENABLE_INT64_SUPPORT='([01])': node '[^']+' "
                      r"\(node rank 1\), rank 2 differs from rank 0\. Supported: the same value "
                      r"on every rank; node '[^']+' \(node rank 0\), rank 0 has '([01])'", output)
    assert found and found[1] != found[2], output[-6000:]
    assert "Fix: set PT_ENABLE_INT64_SUPPORT to the same value on every node" in output
    assert "Failed to deserialize exception" not in output  # the refusal crossed whole
    assert "fit done" not in output
    assert "'loss'" not in output  # no training step ran (the Trainer logs every step)


@pytest.mark.engines_full
def test_two_ray_nodes_train_as_the_same_loop_under_torchrun_on_two_nodes(two_node_fit, tmp_path):
    """The 4-worker Ray Train run gives the losses and parameters of the same Trainer loop
    started by ``torchrun --nnodes 2`` on the same two emulated servers."""
    code, output, ranks = two_node_fit
    assert code == 0, output[-6000:]
    out = tmp_path / "out"
    out.mkdir()
    nodes = two_nodes(tmp_path, {**NODE_0, "HABANA_VISIBLE_MODULES": "0,1"}, NODE_1, str(out),
                      "--torchrun", script="ray_trainer_job.py")
    for code, node_output in nodes:
        assert code == 0, node_output[-6000:]
    reference = trained(out)
    assert [r["node_rank"] for r in reference] == ["0", "0", "1", "1"]
    assert {r["backend"] for r in reference} == {"hccl"}
    assert ranks[0]["losses"] == pytest.approx(reference[0]["losses"], rel=1e-6)
    assert ranks[0]["checksum"] == pytest.approx(reference[0]["checksum"], rel=1e-6)
