"""Tests of the distributed engines (docs/scaling-out.md): multi-node torchrun, DeepSpeed,
Ray. They need requirements/engines.txt, so they live outside ``tests/`` and run in their
own virtual environment (``.ci/steps/50-engines.sh``). Every test here starts real
launchers in subprocesses on the emulator; the ``engines_full`` ones are the slowest and run
from the long-run command in docs/scaling-out.md."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/e2e/conftest imports its helpers top-level

from tests.e2e.conftest import emulated_env  # noqa: E402

HERE = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "engines: needs requirements/engines.txt (slow)")
    config.addinivalue_line(
        "markers", "engines_full: the slowest engine tests, run by the long-run command"
    )


def torchrun(tmp_path: Path, script: str, *args: str, nnodes: int = 1, node_rank: int = 0,
             port: int = 0, env: dict[str, str] | None = None,
             nproc: int = 2) -> subprocess.Popen[str]:
    """Start one node's ``torchrun`` of a script in this folder, ``nproc`` processes on as
    many devices."""
    where = ["--standalone"] if nnodes == 1 else [
        "--nnodes", str(nnodes), "--node_rank", str(node_rank),
        "--master_addr", "127.0.0.1", "--master_port", str(port)]
    argv = [sys.executable, "-m", "torch.distributed.run", *where, "--nproc_per_node",
            str(nproc), str(HERE / script), *args]
    return subprocess.Popen(argv, env=env or emulated_env(tmp_path, devices=nproc), cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def accelerate_launch(folder: Path, script: str, *args: str, num_machines: int,
                      machine_rank: int, port: int, env: dict[str, str]) -> subprocess.Popen[str]:
    """Start one node's ``accelerate launch`` of a script in this folder, 2 processes a node,
    as a user types it on each machine (no config file: ``HF_HOME`` is the node's folder)."""
    accelerate = str(Path(sys.executable).parent / "accelerate")
    argv = [accelerate, "launch", "--num_machines", str(num_machines),
            "--machine_rank", str(machine_rank), "--num_processes", str(2 * num_machines),
            "--main_process_ip", "127.0.0.1", "--main_process_port", str(port),
            str(HERE / script), *args]
    env = {**env, "PATH": str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")}
    return subprocess.Popen(argv, env=env, cwd=folder, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def deepspeed_launch(folder: Path, script: str, *args: str, nnodes: int, node_rank: int,
                     port: int, env: dict[str, str]) -> subprocess.Popen[str]:
    """Start one node's DeepSpeed launcher as the ``deepspeed`` runner starts it on each host
    of a hostfile (over pdsh or ssh): 2 processes a node, ``LOCAL_SIZE`` and no
    ``LOCAL_WORLD_SIZE`` in their environment."""
    import base64

    world = {f"node{n}": [0, 1] for n in range(nnodes)}
    info = base64.urlsafe_b64encode(json.dumps(world).encode()).decode()
    argv = [sys.executable, "-m", "deepspeed.launcher.launch", f"--world_info={info}",
            f"--node_rank={node_rank}", "--master_addr=127.0.0.1", f"--master_port={port}",
            "--no_local_rank", str(HERE / script), *args]
    return subprocess.Popen(argv, env=env, cwd=folder, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def two_nodes(tmp_path: Path, node0: dict[str, str], node1: dict[str, str], *args: str,
              script: str = "two_node_job.py", timeout: str = "60",
              launcher: str = "torchrun") -> list[tuple[int, str]]:
    """One launcher a node of ``script`` (with ``args``), each node its own emulated server
    of 2 devices in ``tmp_path/node<N>``; each node's exit code and output."""
    port = free_port()
    procs = []
    for rank, extra in enumerate((node0, node1)):
        folder = tmp_path / f"node{rank}"
        folder.mkdir()
        # Line-buffered, not unbuffered: both ranks of a node write one error to one pipe,
        # and unbuffered Python writes a traceback's last line in pieces that interleave.
        env = emulated_env(folder, devices=2, HPU_PLUGIN_PREFLIGHT_TIMEOUT=timeout,
                           PYTHONUNBUFFERED="", **extra)
        if launcher == "accelerate":
            procs.append(accelerate_launch(folder, script, *args, num_machines=2,
                                           machine_rank=rank, port=port, env=env))
        elif launcher == "deepspeed":
            procs.append(deepspeed_launch(folder, script, *args, nnodes=2, node_rank=rank,
                                          port=port, env=env))
        else:
            procs.append(torchrun(folder, script, *args, nnodes=2, node_rank=rank, port=port,
                                  env=env))
    return [finish(p) for p in procs]


def finish(proc: subprocess.Popen[str], timeout: int = 600) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def results(output: str) -> list[dict]:
    """Every JSON object the job's processes printed after ``RESULT``, in order. Processes
    of one job share the pipe and run unbuffered, where ``print`` writes the text and the
    newline apart, so two reports can share a line: each is decoded where it starts."""
    decoder = json.JSONDecoder()
    found = []
    for match in re.finditer(r"RESULT ", output):
        found.append(decoder.raw_decode(output, match.end())[0])
    return found


def result(output: str) -> dict:
    """The JSON a job script prints after ``RESULT``."""
    found = results(output)
    if not found:
        raise AssertionError(f"no RESULT line in the job's output:\n{output[-6000:]}")
    return found[0]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session", autouse=True)
def _emulator_builds(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Build (or find) the emulator once, so no job times out compiling it."""
    subprocess.run([sys.executable, "-m", "hpu_emulator", "build"], check=True,
                   env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True)
