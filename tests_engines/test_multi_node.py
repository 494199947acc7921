"""Two emulated servers on this machine, two devices each, one torchrun per node: the job
trains with hccl, and the pre-flight check stops a node that differs or never comes."""

from __future__ import annotations

import time

import pytest

from .conftest import results as reports
from .conftest import two_nodes

pytestmark = [pytest.mark.e2e, pytest.mark.engines]


@pytest.mark.parametrize("launcher", ["torchrun", "accelerate", "deepspeed"])
def test_two_nodes_train_with_hccl_each_on_its_own_server(tmp_path, launcher):
    """``torchrun --nnodes 2``, ``accelerate launch --num_machines 2`` and DeepSpeed's
    per-host launcher, one a node."""
    (rc0, out0), (rc1, out1) = two_nodes(
        tmp_path,
        {"HABANA_VISIBLE_MODULES": "0,1"},
        {"HPU_PLUGIN_EMULATE_MODULES": "4,5", "HABANA_VISIBLE_MODULES": "4,5"},
        launcher=launcher,
    )
    assert rc0 == rc1 == 0, out0[-4000:] + out1[-4000:]
    ranks = sorted(reports(out0) + reports(out1), key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert {r["backend"] for r in ranks} == {"hccl"}
    assert {r["type"] for r in ranks} == {"DistributedType.MULTI_HPU"}
    assert {r["n"] for r in ranks} == {4}
    assert {r["device"] for r in ranks} == {"hpu"}
    assert [(r["node"], r["module"]) for r in ranks] == [
        ("0", "0"), ("0", "1"), ("1", "4"), ("1", "5")]
    assert len({r["checksum"] for r in ranks}) == 1  # DDP kept every replica equal


#: The failure paths under ``accelerate launch`` are the same check reached through
#: Accelerate's torchrun; they run from the long-run command (engines_full).
LAUNCHERS = ["torchrun", pytest.param("accelerate", marks=pytest.mark.engines_full)]


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_node_with_another_int64_setting_stops_the_job_naming_it(tmp_path, launcher):
    (rc0, out0), (rc1, out1) = two_nodes(tmp_path, {}, {"PT_ENABLE_INT64_SUPPORT": "0"},
                                         launcher=launcher)
    assert rc0 != 0 and rc1 != 0
    for out in (out0, out1):
        assert "PreflightError: PT_ENABLE_INT64_SUPPORT='0'" in out, out[-4000:]
        assert "(node rank 1), rank 2 differs from rank 0" in out
        assert "RESULT" not in out  # stopped before training


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_dead_node_ends_the_other_within_the_timeout(tmp_path, launcher):
    """Node 1 is refused by the rules (its server has modules 4,5; nothing selects them):
    node 0 must not wait in the process group for the 30-minute default."""
    start = time.monotonic()
    (rc0, out0), (rc1, out1) = two_nodes(
        tmp_path, {}, {"HPU_PLUGIN_EMULATE_MODULES": "4,5"}, timeout="20", launcher=launcher)
    assert rc1 != 0 and "set HABANA_VISIBLE_MODULES=4,5" in out1, out1[-4000:]
    assert rc0 != 0
    assert "rank(s) 2,3 of 4 did not report to the pre-flight check within 20 s" in out0, (
        out0[-4000:])
    assert time.monotonic() - start < 240
