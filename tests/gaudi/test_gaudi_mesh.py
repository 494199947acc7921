"""The Gaudi rule of device groups applied to a device mesh (``selection.check_mesh``): the
devices a mesh takes on a node are a group as a job's are, checked where the mesh is built."""

from __future__ import annotations

import pytest

from hpu_plugin.gaudi.selection import PlacementError, check_mesh, describe_mesh

SERVER = {i: i for i in range(8)}


def launched(world: int, local_world: int, rank: int, modules: str | None = None) -> dict[str, str]:
    """The variables torchrun sets for ``rank`` (ranks of a node are contiguous)."""
    env = {"WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(local_world), "RANK": str(rank),
           "LOCAL_RANK": str(rank % local_world)}
    if modules is not None:
        env["HABANA_VISIBLE_MODULES"] = modules
    return env


@pytest.mark.parametrize(("world", "shape", "names"), [
    (2, (2,), ("tp",)), (4, (4,), ("tp",)), (8, (8,), ("tp",)),
    (4, (2, 2), ("fsdp", "tp")), (8, (2, 4), ("fsdp", "tp")), (8, (1, 1, 2, 4), None),
])
def test_a_mesh_over_a_supported_group_passes_on_every_rank(world, shape, names):
    for rank in range(world):
        assert check_mesh(launched(world, world, rank), shape, names, SERVER) == ()


def test_a_mesh_over_three_processes_names_its_sizes_and_the_fix():
    with pytest.raises(PlacementError) as info:
        check_mesh(launched(3, 3, 1), (3,), ("tp",), SERVER)
    message = str(info.value)
    assert "device mesh='tp=3'" in message
    assert "it spans 3 of this node's 3 devices, a group of 3" in message
    assert "tp_size=4 with torchrun --nproc-per-node 4" in message


def test_a_sub_mesh_is_a_warning_and_a_process_outside_it_is_not_checked():
    """A group inside a workload the rules accepted: Gaudi documents a workload's groups,
    not the communicators inside one."""
    (warning,) = check_mesh(launched(4, 4, 0), (3,), None, SERVER)
    assert "a sub-mesh spanning 3 of this node's 4 devices, a group of 3" in warning
    assert "not enforced" in warning
    assert check_mesh(launched(4, 4, 3), (3,), None, SERVER) == ()
    # Ranks 0,1 of a job on modules 1,2,3,0 hold modules 1,2: not one of the listed pairs.
    (warning,) = check_mesh(launched(4, 4, 0, modules="1,2,3,0"), (2,), ("tp",), SERVER)
    assert "modules 1,2, not a listed group of 2" in warning
    assert check_mesh(launched(4, 4, 0, modules="0,1,2,3"), (2,), ("tp",), SERVER) == ()


def test_a_mesh_across_nodes_counts_this_nodes_devices_only():
    """Two nodes of 4: tp=8 takes the 4 devices of each; a mesh of the first node's 4 ranks
    holds no device of the second, whose processes are not checked."""
    for rank in range(8):
        assert check_mesh(launched(8, 4, rank), (8,), ("tp",), SERVER) == ()
    assert check_mesh(launched(8, 4, 5), (4,), None, SERVER) == ()
    with pytest.raises(PlacementError):  # 6 ranks over two nodes of 3
        check_mesh(launched(6, 3, 4), (6,), ("tp",), SERVER)


def test_outside_a_launcher_and_for_a_mesh_bigger_than_the_job_nothing_is_checked():
    assert check_mesh({}, (3,), None, SERVER) == ()
    assert check_mesh(launched(2, 2, 0), (4,), None, SERVER) == ()  # torch refuses it


def test_describe_mesh():
    assert describe_mesh((2, 4), ("fsdp", "tp")) == "fsdp=2 x tp=4"
    assert describe_mesh((2, 4)) == "(2, 4)"
