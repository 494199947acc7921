"""Device-selection rules, table-driven from the Gaudi documentation (supported groups, the
documented hl-smi samples, VM module ids from DeepSpeed#5929)."""

from __future__ import annotations

import itertools

import pytest

from hpu_plugin.gaudi import hlsmi, selection
from hpu_plugin.gaudi.config_error import GaudiConfigError
from hpu_plugin.gaudi.selection import PlacementError, check_distributed_job, job_from_environ
from hpu_plugin.hookspecs import Refusal

SERVER = {i: i for i in range(8)}
# "Multiple Dockers" page: a container's index-to-module map (header, comma-space, unsorted).
DOCKER_SAMPLE = "index, module_id\n3, 6\n1, 4\n2, 7\n0, 5\n4, 2\n6, 0\n"
# optimum-habana PR #1089: another host's full map.
OH_1089 = {0: 0, 1: 4, 2: 1, 3: 5, 4: 2, 5: 6, 6: 3, 7: 7}
# A container given HABANA_VISIBLE_DEVICES=0,1,2,3 whose modules are 5,4,7,6 (same page).
CONTAINER_4567 = {0: 5, 1: 4, 2: 7, 3: 6}
VM = (1, 4, 5, 2)  # DeepSpeed#5929

PAIRS = ["0,1", "2,3", "4,5", "6,7"]
QUADS = ["0,1,2,3", "4,5,6,7"]


def env(modules: str | None = None, **extra: str) -> dict[str, str]:
    out = dict(extra)
    if modules is not None:
        out["HABANA_VISIBLE_MODULES"] = modules
    return out


@pytest.mark.parametrize("modules", PAIRS + QUADS + ["0,1,2,3,4,5,6,7", "7,6,5,4,3,2,1,0", "1,0"])
def test_supported_groups_run_on_a_full_server(modules):
    ids = tuple(int(m) for m in modules.split(","))
    for rank in range(len(ids)):
        placement = check_distributed_job(env(modules), len(ids), len(ids), rank, SERVER)
        assert placement.module_id == ids[rank]  # local rank i takes entry i
        assert placement.modules == ids
        assert placement.enforced and not placement.warnings


def _unsupported(size: int) -> list[str]:
    good = {frozenset(g) for g in selection.SUPPORTED_GROUPS[size]}
    return [
        ",".join(map(str, c))
        for c in itertools.combinations(range(8), size)
        if frozenset(c) not in good
    ]


@pytest.mark.parametrize("modules", _unsupported(2) + _unsupported(4))
def test_every_unlisted_combination_is_refused_on_a_full_server(modules):
    size = modules.count(",") + 1
    with pytest.raises(PlacementError) as info:
        check_distributed_job(env(modules), size, size, 0, SERVER)
    message = str(info.value)
    assert f"HABANA_VISIBLE_MODULES={modules!r}" in message
    for group in selection.SUPPORTED_GROUPS[size]:  # the error lists every supported group
        assert ",".join(map(str, group)) in message
    assert "Fix: set HABANA_VISIBLE_MODULES=" in message


@pytest.mark.parametrize("size", [3, 5, 6, 7])
def test_group_sizes_other_than_2_4_8_are_refused_on_every_layout(size):
    modules = ",".join(map(str, range(size)))
    for host in (SERVER, None, (*VM, 0, 3, 6, 7)):
        with pytest.raises(PlacementError, match=f"a group of {size} devices") as info:
            check_distributed_job(env(modules), size, size, 0, host)
        assert "groups of 2 devices with module ids 0,1 | 2,3 | 4,5 | 6,7" in str(info.value)


def test_three_processes_without_visible_modules_name_the_process_count():
    with pytest.raises(PlacementError, match="LOCAL_WORLD_SIZE=3") as info:
        check_distributed_job({}, 3, 3, 2, SERVER)
    assert "--num_processes" in str(info.value)


def test_error_is_a_refusal_and_a_value_error():
    with pytest.raises(Refusal):
        check_distributed_job(env("0,2"), 2, 2, 0, SERVER)
    assert issubclass(PlacementError, ValueError)
    assert issubclass(PlacementError, GaudiConfigError)


def test_device_indices_given_as_module_ids_are_translated():
    with pytest.raises(GaudiConfigError) as info:
        check_distributed_job(env("0,1"), 2, 2, 0, CONTAINER_4567)
    message = str(info.value)
    assert "look like device indices" in message
    assert "HABANA_VISIBLE_MODULES=5,4" in message  # index 0 -> module 5, index 1 -> module 4


def test_documented_docker_sample_translates_indices():
    mapping = hlsmi.parse_index_module_map(DOCKER_SAMPLE)
    with pytest.raises(GaudiConfigError, match="HABANA_VISIBLE_MODULES=5,4"):
        check_distributed_job(env("0,1"), 2, 2, 0, mapping)


def test_unset_visible_modules_in_a_container_suggests_the_host_group():
    with pytest.raises(PlacementError) as info:
        check_distributed_job({}, 2, 2, 0, CONTAINER_4567)
    assert "HABANA_VISIBLE_MODULES is unset" in str(info.value)
    assert "set HABANA_VISIBLE_MODULES=4,5" in str(info.value)


def test_container_with_a_supported_group_enforces_combinations():
    assert selection.host_layout(CONTAINER_4567) == "group"
    assert check_distributed_job(env("5,4"), 2, 2, 1, CONTAINER_4567).module_id == 4
    with pytest.raises(PlacementError, match="not a supported group of 2"):
        check_distributed_job(env("4,6"), 2, 2, 0, CONTAINER_4567)


@pytest.mark.parametrize("host", [VM, None, (0, 2, 4, 6)])
def test_unlisted_combination_is_a_warning_where_module_ids_may_be_arbitrary(host):
    placement = check_distributed_job(env("4,2" if host else "0,2"), 2, 2, 0, host)
    assert not placement.enforced
    assert any("not enforced" in w for w in placement.warnings)


def test_vm_group_of_three_is_still_refused():
    with pytest.raises(PlacementError):
        check_distributed_job(env("1,4,5"), 3, 3, 0, VM)


@pytest.mark.parametrize(
    ("modules", "processes", "match"),
    [
        ("0,1", 4, "lists 2 module\\(s\\) for 4 processes"),
        ("0,1,2,3", 2, None),  # fewer processes than modules: the first two are taken
    ],
)
def test_one_process_per_device(modules, processes, match):
    if match:
        with pytest.raises(PlacementError, match=match):
            check_distributed_job(env(modules), processes, processes, 0, SERVER)
    else:
        placement = check_distributed_job(env(modules), processes, processes, 1, SERVER)
        assert placement.modules == (0, 1) and placement.module_id == 1
        assert any("stay unused" in w for w in placement.warnings)


def test_duplicate_module_ids_are_refused():
    with pytest.raises(GaudiConfigError, match="appears more than once"):
        check_distributed_job(env("0,0"), 2, 2, 0, SERVER)


def test_module_not_on_host_is_refused():
    with pytest.raises(GaudiConfigError, match="not on this host"):
        check_distributed_job(env("6,7"), 2, 2, 0, (0, 1, 2, 3))


def test_not_distributed_takes_first_visible_module_or_hls_module_id():
    assert check_distributed_job(env("3,2,1"), 1, 1, 0, SERVER).module_id == 3
    assert check_distributed_job({"HLS_MODULE_ID": "5"}, 1, 1, 0, SERVER).module_id == 5
    assert check_distributed_job({}, 1, 1, 0, None).module_id is None
    with pytest.raises(GaudiConfigError, match="HLS_MODULE_ID='5'"):
        check_distributed_job({"HLS_MODULE_ID": "5"}, 1, 1, 0, CONTAINER_4567.keys())


def test_hls_module_id_in_a_distributed_job_is_kept_and_reported():
    """hccl sets HLS_MODULE_ID from the local rank only when it is not set already."""
    placement = check_distributed_job(env("2,3", HLS_MODULE_ID="0"), 2, 2, 1, SERVER)
    assert placement.module_id == 0
    assert any("HLS_MODULE_ID=0 is set, and hccl keeps" in w and "not 3" in w
               and "unset HLS_MODULE_ID" in w for w in placement.warnings)
    same = check_distributed_job(env("2,3", HLS_MODULE_ID="3"), 2, 2, 1, SERVER)
    assert same.module_id == 3 and not same.warnings


def test_one_device_per_node_in_a_multi_node_job_warns():
    placement = check_distributed_job(env("0"), 4, 1, 0, SERVER)
    assert placement.module_id == 0 and placement.warnings


@pytest.mark.parametrize(
    ("args", "variable"),
    [
        ((0, 1, 0), "WORLD_SIZE"),
        ((2, 0, 0), "LOCAL_WORLD_SIZE"),
        ((2, 4, 0), "LOCAL_WORLD_SIZE"),
        ((2, 2, 2), "LOCAL_RANK"),
        ((2, 2, -1), "LOCAL_RANK"),
        ((16, 16, 0), "LOCAL_WORLD_SIZE"),
    ],
)
def test_launcher_values_out_of_range(args, variable):
    with pytest.raises(PlacementError, match=variable):
        check_distributed_job({}, *args, host_modules=SERVER)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({"WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, (2, 2, 1)),
        ({"WORLD_SIZE": "4", "LOCAL_RANK": "0"}, (4, 4, 0)),
        ({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}, (2, 2, 1)),
        # DeepSpeed's launcher (deepspeed/launcher/launch.py) sets LOCAL_SIZE, not
        # LOCAL_WORLD_SIZE: two servers of 8, and three servers of 2
        ({"WORLD_SIZE": "16", "RANK": "11", "LOCAL_RANK": "3", "LOCAL_SIZE": "8"}, (16, 8, 3)),
        ({"WORLD_SIZE": "6", "RANK": "5", "LOCAL_RANK": "1", "LOCAL_SIZE": "2"}, (6, 2, 1)),
    ],
)
def test_job_from_environ(environ, expected):
    assert job_from_environ(environ) == expected


def test_a_multi_node_deepspeed_launch_passes_the_device_checks():
    environ = {"WORLD_SIZE": "6", "RANK": "5", "LOCAL_RANK": "1", "LOCAL_SIZE": "2",
               "HABANA_VISIBLE_MODULES": "2,3"}
    placement = selection.check_job_from_environ(environ, SERVER)
    assert placement is not None and placement.modules == (2, 3) and placement.module_id == 3


def test_a_job_too_large_for_one_server_must_say_its_processes_per_server():
    with pytest.raises(PlacementError, match="LOCAL_WORLD_SIZE is unset") as info:
        job_from_environ({"WORLD_SIZE": "16", "LOCAL_RANK": "3"})
    assert "(or LOCAL_SIZE)" in str(info.value) and "16 processes" in str(info.value)


def test_job_from_environ_names_a_garbled_variable():
    with pytest.raises(PlacementError, match="LOCAL_RANK='one'"):
        job_from_environ({"WORLD_SIZE": "2", "LOCAL_RANK": "one"})


def test_check_job_from_environ_outside_a_launcher_is_none():
    assert selection.check_job_from_environ({"HABANA_VISIBLE_MODULES": "0,2"}, SERVER) is None
    with pytest.raises(PlacementError):
        selection.check_job_from_environ(
            {"HABANA_VISIBLE_MODULES": "0,2", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, SERVER
        )


@pytest.mark.parametrize(
    ("host", "layout"),
    [
        (SERVER, "server"),
        (OH_1089, "server"),
        (CONTAINER_4567, "group"),
        ((2, 3), "group"),
        (VM, "arbitrary"),
        ((0, 2), "arbitrary"),
        (None, "unknown"),
    ],
)
def test_host_layout(host, layout):
    assert selection.host_layout(host) == layout


def test_values_the_process_does_not_read_do_not_fail_a_distributed_job():
    # HABANA_VISIBLE_DEVICES acts at `docker run`, not in the process
    environ = env("0,1", HABANA_VISIBLE_DEVICES="garbage")
    assert check_distributed_job(environ, 2, 2, 1, SERVER).module_id == 1


def test_an_unreadable_hls_module_id_is_refused_in_a_job_too():
    # hccl keeps a set HLS_MODULE_ID, and the Gaudi software acquires the module by it
    environ = env("0,1", HLS_MODULE_ID="x")
    for job in ((2, 2, 1), (1, 1, 0)):
        with pytest.raises(GaudiConfigError, match="HLS_MODULE_ID='x'"):
            check_distributed_job(environ, *job, SERVER)
