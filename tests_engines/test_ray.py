"""Ray on emulated Gaudi: Ray's HPU accelerator manager counts the emulated devices, and the
placement Ray gives a worker (its one module, LOCAL_RANK = node-local rank) is accepted."""

from __future__ import annotations

import subprocess
import sys

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
