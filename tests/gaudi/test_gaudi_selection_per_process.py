"""One module per process (Ray's ``{"HPU": 1}`` workers, Kubernetes' Gaudi device plugin):
each worker's ``HABANA_VISIBLE_MODULES`` lists its own module and ``LOCAL_RANK`` is the
node-local rank. The Gaudi software acquires a device by type among the visible ones, so
the worker takes that module; the node's group is checked across ranks (preflight)."""

from __future__ import annotations

import ast
import inspect

import pytest

from hpu_plugin.gaudi import selection
from hpu_plugin.gaudi.config_error import GaudiConfigError
from hpu_plugin.gaudi.selection import PlacementError, check_distributed_job

SERVER = {i: i for i in range(8)}


@pytest.mark.parametrize(("module", "local_rank"), [(0, 0), (1, 1), (5, 1), (6, 3)])
def test_each_worker_takes_its_one_visible_module(module, local_rank):
    environ = {"HABANA_VISIBLE_MODULES": str(module)}
    placement = check_distributed_job(environ, 4, 4, local_rank, SERVER)
    assert placement.per_process
    assert placement.module_id == module
    assert placement.modules == (module,)
    assert placement.group == "one module per process"
    assert not placement.warnings


def test_the_issue_placement_is_accepted():
    """The refusal the issue quotes: HABANA_VISIBLE_MODULES='1' with local rank 1 of 2."""
    placement = check_distributed_job({"HABANA_VISIBLE_MODULES": "1"}, 2, 2, 1, SERVER)
    assert placement.module_id == 1


def test_a_module_not_on_the_host_is_still_refused():
    with pytest.raises(GaudiConfigError, match=r"HABANA_VISIBLE_MODULES='6': module id\(s\) 6 not"):
        check_distributed_job({"HABANA_VISIBLE_MODULES": "6"}, 2, 2, 1, {0: 0, 1: 1})


def test_two_modules_for_three_processes_is_still_refused():
    with pytest.raises(PlacementError, match="local rank 2 would have no device"):
        check_distributed_job({"HABANA_VISIBLE_MODULES": "0,1"}, 3, 3, 0, SERVER)


def test_no_function_of_the_rules_is_over_80_lines():
    tree = ast.parse(inspect.getsource(selection))
    lengths = {
        node.name: node.end_lineno - node.lineno + 1
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
    }
    assert lengths["check_distributed_job"] < 80
    assert max(lengths.values()) <= 80, lengths
