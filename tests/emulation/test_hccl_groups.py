"""HCCL's partial-server rule, as the emulated ``hccl`` backend enforces it."""

from __future__ import annotations

import pytest

from hpu_emulator.hccl import check_module_group


@pytest.mark.parametrize(
    "modules", [[0], [0, 1], [3, 2], [4, 5], [6, 7], [0, 1, 2, 3], [7, 6, 5, 4], list(range(8))]
)
def test_supported_groups(modules):
    check_module_group(modules)


@pytest.mark.parametrize("modules", [[1, 2], [0, 2], [0, 1, 2], [2, 3, 4, 5], [0, 1, 2, 3, 4]])
def test_unsupported_groups_name_the_modules_and_the_fix(modules):
    with pytest.raises(RuntimeError) as info:
        check_module_group(modules)
    assert f"this job uses modules {','.join(map(str, modules))}" in str(info.value)
    assert "HABANA_VISIBLE_MODULES" in str(info.value)


def test_two_processes_on_one_module_are_refused():
    with pytest.raises(RuntimeError, match="same Gaudi module"):
        check_module_group([3, 3])
