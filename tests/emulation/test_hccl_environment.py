"""The environment the ``hccl`` module sets up, as the bridge's ``initialize_distributed_hpu``
does: at import for torchrun and mpirun, and when a custom launcher calls it with its own
world size, rank and local rank (Gaudi's documented way for launchers that set nothing)."""

from __future__ import annotations

import json

import pytest

SHOW = """
import json, os
import torch
import habana_frameworks.torch.distributed.hccl as hccl
{call}
names = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "HLS_MODULE_ID", "ID", "MASTER_ADDR")
print(json.dumps({{"returned": returned, **{{n: os.environ.get(n) for n in names}}}}))
"""


def _environment(run, call: str, **env: str) -> dict[str, object]:
    out = run(SHOW.format(call=call), env).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_a_custom_launcher_passes_its_ranks_and_they_are_exported(run):
    seen = _environment(run, "returned = hccl.initialize_distributed_hpu(4, 3, 1)")
    assert seen["returned"] == [4, 3, 1]
    assert (seen["WORLD_SIZE"], seen["RANK"], seen["LOCAL_RANK"]) == ("4", "3", "1")
    assert seen["HLS_MODULE_ID"] == "1" and seen["ID"] == "3"


@pytest.mark.parametrize(("env", "expected"), [
    # mpirun: all three of Open MPI's variables are mapped
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
      "OMPI_COMM_WORLD_RANK": "1"},
     {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1", "HLS_MODULE_ID": "1", "ID": "1",
      "MASTER_ADDR": "localhost"}),
    # the launcher's own variables, all set, are not replaced by Open MPI's
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_SIZE": "8",
      "OMPI_COMM_WORLD_RANK": "5", "WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"},
     {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1", "HLS_MODULE_ID": "1", "ID": "1"}),
    # part of Open MPI's set maps nothing
    ({"OMPI_COMM_WORLD_RANK": "5"},
     {"WORLD_SIZE": None, "RANK": None, "LOCAL_RANK": None, "HLS_MODULE_ID": None,
      "ID": None, "MASTER_ADDR": "localhost"}),
    # a module the user chose stays chosen
    ({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1", "HLS_MODULE_ID": "6"},
     {"HLS_MODULE_ID": "6", "ID": "1"}),
])
def test_the_import_maps_ranks_as_the_bridge_does(run, env, expected):
    seen = _environment(run, "returned = None", **env)
    assert {name: seen[name] for name in expected} == expected


@pytest.mark.parametrize(("env", "named"), [
    # the bridge asserts this one at import; a local rank beyond the server's modules with
    # no list fails only when the process takes its device (test_distributed_launch.py)
    ({"LOCAL_RANK": "3", "HABANA_VISIBLE_MODULES": "0,1"}, "HABANA_VISIBLE_MODULES"),
])
def test_a_local_rank_beyond_the_modules_is_refused_at_import(run, env, named):
    done = run(SHOW.format(call="returned = None"), {"WORLD_SIZE": "2", "RANK": "1", **env},
               check=False)
    assert done.returncode != 0
    assert named in done.stderr and f"LOCAL_RANK={env['LOCAL_RANK']}" in done.stderr


def test_one_visible_module_is_pinned_by_the_plugin_for_any_local_rank(run):
    """A process started with its one module and a local rank of 1 (a launcher that gives
    each process its own module): the plugin pins that module before the Gaudi software's
    import, which would otherwise take the local rank as an index and assert."""
    seen = _environment(run, "returned = None", WORLD_SIZE="2", RANK="1", LOCAL_RANK="1",
                        HABANA_VISIBLE_MODULES="5")
    assert (seen["HLS_MODULE_ID"], seen["LOCAL_RANK"]) == ("5", "1")


def test_without_the_pin_the_import_asserts_as_the_bridge_does(run):
    """The bridge's ``_setup_module_id``: local rank 1 indexes a list of one module."""
    call = ("os.environ.pop('HLS_MODULE_ID')\n"
            "returned = hccl.initialize_distributed_hpu(2, 1, 1)")
    done = run(SHOW.format(call=call), {"HABANA_VISIBLE_MODULES": "5"}, check=False)
    assert done.returncode != 0
    assert "AssertionError: There is not enough devices available" in done.stderr
    assert "LOCAL_RANK=1" in done.stderr and "HABANA_VISIBLE_MODULES=5" in done.stderr
