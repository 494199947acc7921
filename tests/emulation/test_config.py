"""The emulator's configuration: every bad value is refused with its variable's name and the
accepted values; good values describe the server and the process's view of it."""

from __future__ import annotations

import sys

import pytest

from hpu_emulator import config
from hpu_emulator.errors import EmulationError

GIB = 1024**3


def read(**env: str) -> config.EmulatorConfig:
    env.setdefault("HPU_PLUGIN_EMULATE", "1")
    return config.read(env)


def acquired(**env: str) -> int:
    """The module a process takes at its first device use, with this environment."""
    env.setdefault("HPU_PLUGIN_EMULATE", "1")
    return config.acquired_module(env, list(config.read(env).visible_modules))


@pytest.mark.parametrize(
    ("env", "variable", "accepted"),
    [
        ({"HPU_PLUGIN_EMULATE": "gaudi4"}, "HPU_PLUGIN_EMULATE='gaudi4'", "gaudi3"),
        ({"HPU_PLUGIN_EMULATE": "2"}, "HPU_PLUGIN_EMULATE='2'", "gaudi2"),
        ({"HPU_PLUGIN_EMULATE_DEVICES": "0"}, "HPU_PLUGIN_EMULATE_DEVICES='0'", "1 to 8"),
        ({"HPU_PLUGIN_EMULATE_DEVICES": "9"}, "HPU_PLUGIN_EMULATE_DEVICES='9'", "1 to 8"),
        ({"HPU_PLUGIN_EMULATE_DEVICES": "two"}, "HPU_PLUGIN_EMULATE_DEVICES='two'", "1 to 8"),
        ({"HPU_PLUGIN_EMULATE_MODULES": "0,x"}, "HPU_PLUGIN_EMULATE_MODULES='0,x'", "0..7"),
        ({"HPU_PLUGIN_EMULATE_MODULES": "1,1"}, "HPU_PLUGIN_EMULATE_MODULES='1,1'", "0..7"),
        ({"HPU_PLUGIN_EMULATE_MODULES": "0,8"}, "HPU_PLUGIN_EMULATE_MODULES='0,8'", "0..7"),
        (
            {"HPU_PLUGIN_EMULATE_MODULES": "0,1,2", "HPU_PLUGIN_EMULATE_DEVICES": "2"},
            "HPU_PLUGIN_EMULATE_DEVICES=2",
            "as many ids as devices",
        ),
        ({"HPU_PLUGIN_EMULATE_MEMORY": "lots"}, "HPU_PLUGIN_EMULATE_MEMORY='lots'", "96GiB"),
        ({"HPU_PLUGIN_EMULATE_MEMORY": "0"}, "HPU_PLUGIN_EMULATE_MEMORY='0'", "96GiB"),
        ({"HABANA_VISIBLE_MODULES": "0,9"}, "HABANA_VISIBLE_MODULES='0,9'", "0,1,2,3,4,5,6,7"),
        (
            {"HPU_PLUGIN_EMULATE_DEVICES": "2", "HABANA_VISIBLE_DEVICES": "2"},
            "HABANA_VISIBLE_DEVICES='2'",
            "indices 0..1",
        ),
        ({"HLS_MODULE_ID": "9"}, "HLS_MODULE_ID='9'", "one of 0,1,2,3,4,5,6,7"),
        ({"HLS_MODULE_ID": "0,1"}, "HLS_MODULE_ID='0,1'", "one module id"),
        ({"HABANA_VISIBLE_MODULES": "0,0"}, "HABANA_VISIBLE_MODULES='0,0'", "at most once"),
        ({"HABANA_VISIBLE_DEVICES": "0,x"}, "HABANA_VISIBLE_DEVICES='0,x'", "device indices"),
        ({"PT_HPU_LAZY_MODE": "false"}, "PT_HPU_LAZY_MODE='false'", "'0' (eager"),
        ({"PT_ENABLE_INT64_SUPPORT": "maybe"}, "PT_ENABLE_INT64_SUPPORT='maybe'", "'1'"),
    ],
)
def test_bad_values_name_the_variable_and_the_accepted_values(env, variable, accepted):
    with pytest.raises(EmulationError) as info:
        read(**env)
    message = str(info.value)
    assert variable in message
    assert accepted in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("value", "name", "memory"),
    [("1", "GAUDI2", 96 * GIB), ("Gaudi", "GAUDI", 32 * GIB), ("GAUDI2", "GAUDI2", 96 * GIB),
     ("gaudi3", "GAUDI3", 128 * GIB), ("yes", "GAUDI2", 96 * GIB)],
)
def test_generation_names_are_case_insensitive_with_memory_by_generation(value, name, memory):
    cfg = read(HPU_PLUGIN_EMULATE=value)
    assert (cfg.device_name, cfg.memory) == (name, memory)


def test_default_server_is_an_eight_device_hls():
    cfg = read()
    assert cfg.server_modules == tuple(range(8))
    assert cfg.device_count == 8
    assert acquired() == 0


@pytest.mark.parametrize(
    ("text", "size"),
    [("96GiB", 96 * GIB), ("512 MiB", 512 * 1024**2), ("1073741824", GIB), ("2gb", 2 * 10**9),
     ("1.5GiB", int(1.5 * GIB))],
)
def test_memory_sizes(text, size):
    assert read(HPU_PLUGIN_EMULATE_MEMORY=text).memory == size


def test_visible_modules_restrict_and_order_the_devices():
    cfg = read(HPU_PLUGIN_EMULATE_MODULES="5,4,7,6", HABANA_VISIBLE_MODULES="7,5")
    assert cfg.device_count == 2
    assert cfg.visible_modules == (7, 5)
    assert cfg.visible_indices == (2, 0)
    assert acquired(HPU_PLUGIN_EMULATE_MODULES="5,4,7,6", HABANA_VISIBLE_MODULES="7,5") == 7


def test_visible_devices_are_indices_and_modules_select_among_them():
    cfg = read(HABANA_VISIBLE_DEVICES="4,5,6,7", HABANA_VISIBLE_MODULES="6,7")
    assert cfg.visible_modules == (6, 7)
    with pytest.raises(EmulationError, match="HABANA_VISIBLE_MODULES='1'"):
        read(HABANA_VISIBLE_DEVICES="4,5", HABANA_VISIBLE_MODULES="1")


def test_acquired_module_follows_the_real_precedence():
    assert acquired(HLS_MODULE_ID="3") == 3
    assert acquired(HABANA_VISIBLE_MODULES="4,5,6,7", LOCAL_RANK="2") == 6
    assert acquired(HABANA_VISIBLE_MODULES="4,5,6,7", LOCAL_RANK="2", HLS_MODULE_ID="5") == 5
    assert acquired(LOCAL_RANK="1") == 1


def test_a_local_rank_beyond_the_devices_fails_at_acquisition_not_at_start():
    """Importing the Gaudi software takes no device (the hccl import only sets
    HLS_MODULE_ID): a CPU-only job with more processes than Gaudis starts on every rank."""
    cfg = read(HPU_PLUGIN_EMULATE_DEVICES="1", LOCAL_RANK="1")
    assert cfg.device_count == 1
    with pytest.raises(EmulationError, match="LOCAL_RANK=1 exceeds the 1 visible"):
        acquired(HPU_PLUGIN_EMULATE_DEVICES="1", LOCAL_RANK="1")
    read(HABANA_VISIBLE_MODULES="2,3", LOCAL_RANK="2")
    with pytest.raises(EmulationError, match="LOCAL_RANK=2 has no entry in HABANA_VISIBLE_"):
        acquired(HABANA_VISIBLE_MODULES="2,3", LOCAL_RANK="2")


def test_int64_and_fp16_support_follow_mode_and_generation():
    assert read(PT_HPU_LAZY_MODE="0").int64_supported
    assert not read().int64_supported  # lazy mode is the stack's default
    assert not read(PT_HPU_LAZY_MODE="0", PT_ENABLE_INT64_SUPPORT="0").int64_supported
    assert read(PT_HPU_LAZY_MODE="0", PT_ENABLE_INT64_SUPPORT="1").int64_supported
    # in lazy mode the switch alone decides, off when unset (common/lazy/utils.cpp)
    assert read(PT_ENABLE_INT64_SUPPORT="1").int64_supported
    gaudi1 = read(HPU_PLUGIN_EMULATE="gaudi", PT_ENABLE_INT64_SUPPORT="1")
    assert not gaudi1.int64_supported
    assert not gaudi1.fp16_supported
    assert read(HPU_PLUGIN_EMULATE="gaudi3").fp16_supported


@pytest.mark.parametrize("key", ["gaudi", "gaudi2", "gaudi3"])
def test_hlsmi_prints_what_the_plugin_parses_back(key, capsys, monkeypatch):
    """The emulator's hl-smi goes through gaudi/'s formatter, and its product name maps back
    to the generation the emulator claims to be."""
    from hpu_emulator import fake_hlsmi as emulated
    from hpu_plugin.gaudi import hlsmi
    from hpu_plugin.gaudi.generations import generation_from_name

    monkeypatch.setenv("HPU_PLUGIN_EMULATE", key)
    monkeypatch.setenv("HPU_PLUGIN_EMULATE_MODULES", "3,2,1,0")
    assert emulated.main(["-Q", ",".join(hlsmi.DEVICE_FIELDS), "-f", "csv"]) == 0
    rows = hlsmi.parse_csv(capsys.readouterr().out, hlsmi.DEVICE_FIELDS)
    assert hlsmi.rows_to_index_module_map(rows) == {0: 3, 1: 2, 2: 1, 3: 0}
    generation = generation_from_name(rows[0]["name"])
    assert generation is not None and generation.name == read(HPU_PLUGIN_EMULATE=key).device_name
    assert hlsmi.parse_mib(rows[0]["memory.total"]) == generation.memory_gib * 1024


def test_a_search_path_entry_is_withdrawn_with_the_modules_found_there(tmp_path) -> None:
    from hpu_emulator import runtime
    from hpu_plugin.patching import Patches

    (tmp_path / "hpu_test_standin.py").write_text("VALUE = 1\n")
    entry = str(tmp_path)
    patches = Patches()
    runtime.add_to_search_path(entry, patches)
    runtime.add_to_search_path(entry, patches)  # already there: recorded once
    try:
        import hpu_test_standin  # type: ignore[import-not-found]

        assert hpu_test_standin.VALUE == 1
        assert patches.made == [f"sys.path += {entry!r}"]
    finally:
        patches.undo()
    assert entry not in sys.path
    assert "hpu_test_standin" not in sys.modules
