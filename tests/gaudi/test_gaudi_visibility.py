"""HABANA_VISIBLE_MODULES / HABANA_VISIBLE_DEVICES / HLS_MODULE_ID parsing."""

from __future__ import annotations

import pytest

from hpu_plugin.gaudi import visibility
from hpu_plugin.gaudi.visibility import VisibilityError


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, None),
        ("0", (0,)),
        ("0,1", (0, 1)),
        ("5,4,7,6", (5, 4, 7, 6)),  # the Docker example: order is kept (rank i takes entry i)
        (" 2 , 3 ", (2, 3)),
        ("0,1,2,3,4,5,6,7", tuple(range(8))),
        ("12,40", (12, 40)),  # arbitrary VM ids parse; the host check decides
    ],
)
def test_visible_modules(raw, expected):
    assert visibility.parse_visible_modules(raw) == expected


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("", "it is empty"),
        ("  ", "it is empty"),
        ("0,,1", "an entry is empty"),
        ("0,1,", "an entry is empty"),
        ("0;1", "'0;1' is not a module id"),
        ("a,b", "'a' is not a module id"),
        ("-1", "'-1' is not a module id"),
        ("0,0", "0 appears more than once"),
        ("0,1,2,3,4,5,6,7,8", "it lists 9"),
        ("\u0663", "is not a module id"),  # a non-ASCII digit int() would accept
    ],
)
def test_visible_modules_errors_name_the_variable_value_and_fix(raw, problem):
    with pytest.raises(VisibilityError) as info:
        visibility.parse_visible_modules(raw)
    message = str(info.value)
    assert message.startswith(f"HABANA_VISIBLE_MODULES={raw!r}")
    assert problem in message
    assert "Fix:" in message and "Supported:" in message


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(None, None), ("all", None), ("ALL", None), ("0,1,2,3", (0, 1, 2, 3)), ("3", (3,))],
)
def test_visible_devices(raw, expected):
    assert visibility.parse_visible_devices(raw) == expected


def test_visible_devices_error_points_to_modules():
    with pytest.raises(VisibilityError, match="HABANA_VISIBLE_DEVICES='hpu:3'") as info:
        visibility.parse_visible_devices("hpu:3")
    assert "use HABANA_VISIBLE_MODULES" in str(info.value)


@pytest.mark.parametrize(("raw", "expected"), [(None, None), ("0", 0), (" 7 ", 7)])
def test_module_id(raw, expected):
    assert visibility.parse_module_id(raw) == expected


@pytest.mark.parametrize("raw", ["", "0,1", "x", "-3"])
def test_module_id_is_a_single_id(raw):
    with pytest.raises(VisibilityError, match="HLS_MODULE_ID"):
        visibility.parse_module_id(raw)


def test_check_modules_exist_accepts_present_modules():
    visibility.check_modules_exist((5, 4), {0: 5, 1: 4})


def test_check_modules_exist_without_index_translation():
    with pytest.raises(VisibilityError) as info:
        visibility.check_modules_exist((9,), {0: 5, 1: 4})
    assert "choose module ids from 4,5" in str(info.value)
    assert "device indices" not in str(info.value)
