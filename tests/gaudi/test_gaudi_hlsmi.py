"""hl-smi CSV: the documented sample outputs, the formatter the emulator prints with, and
running the tool with a timeout (``hpu_plugin.machine``; a missing hl-smi is no error)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from hpu_plugin import machine
from hpu_plugin.gaudi import hlsmi
from hpu_plugin.gaudi.config_error import GaudiConfigError
from hpu_plugin.gaudi.hlsmi import HlSmiError

# The "Multiple Dockers" page (header, comma-space separators, unsorted rows).
DOCKER = "index, module_id\n3, 6\n1, 4\n2, 7\n0, 5\n4, 2\n6, 0\n"
# optimum-habana PR #1089, the same format on another host.
OH_1089 = "index, module_id\n0, 0\n1, 4\n2, 1\n3, 5\n4, 2\n5, 6\n6, 3\n7, 7\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (DOCKER, {3: 6, 1: 4, 2: 7, 0: 5, 4: 2, 6: 0}),
        (OH_1089, {0: 0, 1: 4, 2: 1, 3: 5, 4: 2, 5: 6, 6: 3, 7: 7}),
        ("0, 5\n1, 4\n", {0: 5, 1: 4}),  # -f csv,noheader
        ("index,module_id\r\n0,3\r\n\r\n", {0: 3}),  # no space, CRLF, blank line
        ("index, module_id\n", {}),  # header only: no device
    ],
)
def test_parse_index_module_map(text, expected):
    assert hlsmi.parse_index_module_map(text) == expected


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "printed nothing"),
        ("index, module_id\n0\n", "row 1 has 1 fields"),
        ("index, module_id\n0, x\n", "module_id is not a non-negative integer"),
        ("index, module_id\n0, 1\n0, 2\n", "index 0 twice"),
        ("index, module_id\n0, 1\n1, 1\n", "module id 1 twice"),
        ("name, bus_id\nHL-225, 0000:19:00.0\n", "lacks index or module_id"),
        ("index, , module_id\n", "empty field name"),
    ],
)
def test_parse_index_module_map_errors(text, match):
    with pytest.raises(HlSmiError, match=match):
        hlsmi.parse_index_module_map(text)


def test_format_csv_reproduces_the_documented_sample():
    rows = [
        {"index": i, "module_id": m} for i, m in [(3, 6), (1, 4), (2, 7), (0, 5), (4, 2), (6, 0)]
    ]
    assert hlsmi.format_csv(rows, hlsmi.INDEX_MODULE_FIELDS) == DOCKER
    assert hlsmi.format_csv(rows[:1], hlsmi.INDEX_MODULE_FIELDS, header=False) == "3, 6\n"


def test_format_then_parse_round_trips_device_fields():
    rows = [
        {
            "index": 0,
            "module_id": 2,
            "name": "HL-225",
            "memory.total": "98304 MiB",
            "bus_id": "0000:19:00.0",
        }
    ]
    parsed = hlsmi.parse_csv(hlsmi.format_csv(rows, hlsmi.DEVICE_FIELDS), hlsmi.DEVICE_FIELDS)
    assert parsed == [{k: str(v) for k, v in rows[0].items()}]


def test_units_in_header_are_dropped():
    rows = hlsmi.parse_csv("index, memory.total [MiB]\n0, 98304\n")
    assert rows == [{"index": "0", "memory.total": "98304"}]


@pytest.mark.parametrize(
    ("value", "mib"),
    [
        ("98304", 98304),
        ("98304 MiB", 98304),
        ("96 GiB", 98304),
        ("N/A", None),
        ("", None),
        ("12 parsecs", None),
    ],
)
def test_parse_mib(value, mib):
    assert hlsmi.parse_mib(value) == mib


def _fake_tool(tmp_path: Path, body: str) -> str:
    tool = tmp_path / "hl-smi-fake"
    tool.write_text(f"#!{sys.executable}\n{body}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return str(tool)


def test_query_runs_the_tool_with_the_documented_arguments(tmp_path):
    tool = _fake_tool(
        tmp_path,
        (
            "import sys\n"
            "assert sys.argv[1:] == ['-Q', 'index,module_id', '-f', 'csv'], sys.argv\n"
            f"sys.stdout.write({DOCKER!r})"
        ),
    )
    assert machine.index_module_map(executable=tool) == hlsmi.parse_index_module_map(DOCKER)
    assert machine.host_modules(executable=tool) == (0, 2, 4, 5, 6, 7)


def test_missing_tool_is_no_error():
    answer = machine.query(executable="hl-smi-does-not-exist-here")
    assert answer.rows is None and answer.missing
    assert machine.index_module_map(executable="hl-smi-does-not-exist-here") is None


def test_hanging_tool_times_out(tmp_path):
    tool = _fake_tool(tmp_path, "import time\ntime.sleep(30)")
    answer = machine.query(timeout=0.5, executable=tool)
    assert answer.rows is None and not answer.missing
    assert "did not answer" in answer.reason


def test_failing_tool_reports_its_last_line(tmp_path):
    tool = _fake_tool(tmp_path, "import sys\nsys.stderr.write('no devices found\\n')\nsys.exit(3)")
    answer = machine.query(executable=tool)
    assert answer.rows is None and "exited 3: no devices found" in answer.reason


def test_garbled_output_is_a_reason_not_an_exception(tmp_path):
    tool = _fake_tool(tmp_path, "print('index, module_id'); print('0')")
    answer = machine.query(executable=tool)
    assert answer.rows is None and "row 1" in answer.reason
    assert os.path.exists(tool)


@pytest.mark.parametrize("raw", ["abc", "-1", "0", "nan", "inf"])
def test_bad_timeout_setting_is_an_error_naming_it(monkeypatch, raw):
    # A silently replaced or infinite timeout is how a stuck driver becomes a hang.
    monkeypatch.setenv("HPU_PLUGIN_HLSMI_TIMEOUT", raw)
    with pytest.raises(GaudiConfigError, match=r"HPU_PLUGIN_HLSMI_TIMEOUT.*Fix: set it to"):
        machine.query()


def test_timeout_setting_is_read(monkeypatch):
    monkeypatch.setenv("HPU_PLUGIN_HLSMI_TIMEOUT", "2.5")
    assert machine.default_timeout() == 2.5
    monkeypatch.delenv("HPU_PLUGIN_HLSMI_TIMEOUT")
    assert machine.default_timeout() == machine.TIMEOUT
