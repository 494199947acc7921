"""The selftest's parts that need no device: the verdict line, fault specs, module placement,
scrubbing and the table. Fast; the end-to-end runs are in test_selftest_emulator.py."""

from __future__ import annotations

import pytest

from hpu_plugin.selftest import catalog, faults, protocol
from hpu_plugin.selftest.placement import Placement
from hpu_plugin.selftest.report import documented_environment, scrub, table


def test_the_last_verdict_line_wins_and_garbage_is_no_verdict(capsys):
    protocol.emit(protocol.FAIL, "first")
    protocol.emit(protocol.PASS, "second", {"n": 1})
    out = capsys.readouterr().out
    assert protocol.parse(out) == {"status": "pass", "reason": "second", "details": {"n": 1}}
    assert protocol.parse("no verdict here\n") is None
    assert protocol.parse(protocol.MARK + "{not json\n") is None
    assert protocol.parse(protocol.MARK + '{"status": "maybe"}\n') is None
    with pytest.raises(ValueError, match="unknown selftest verdict"):
        protocol.emit("maybe", "x")


def test_fault_specs_are_read_and_a_bad_one_names_the_variable():
    env = {faults.VARIABLE: "hang:numerics, busy:0,fail:detect"}
    assert faults.parse(env) == [("hang", "numerics"), ("busy", "0"), ("fail", "detect")]
    assert faults.busy_modules(env) == {"0"}
    assert faults.parse({}) == []
    for bad in ("explode:detect", "hang", "hang:"):
        with pytest.raises(faults.FaultSpecError, match=faults.VARIABLE):
            faults.parse({faults.VARIABLE: bad})


def test_fail_fault_raises_in_the_named_check_only():
    env = {faults.VARIABLE: "fail:detect"}
    faults.apply("numerics", env)  # another check: nothing happens
    with pytest.raises(faults.InjectedFailure, match="detect"):
        faults.apply("detect", env)


def test_placement_on_a_whole_server_takes_supported_pairs_around_busy_modules():
    placement = Placement(list(range(8)), environ={})
    assert placement.choose(1) == ([0], "")
    assert placement.choose(2) == ([0, 1], "")
    assert placement.mark_busy("0") and not placement.mark_busy("0")
    assert not placement.mark_busy("9") and not placement.mark_busy("?")
    assert placement.choose(1) == ([1], "")
    assert placement.choose(2) == ([2, 3], "")  # 1 alone is free of its pair 0,1
    for module in ("2", "4", "6"):
        placement.mark_busy(module)
    modules, why = placement.choose(2)
    assert modules == [] and "no supported group of 2 free" in why


def test_placement_follows_the_users_modules_and_says_why_a_pair_cannot_run():
    placement = Placement(list(range(8)), environ={"HABANA_VISIBLE_MODULES": "5"})
    assert placement.origin == "HABANA_VISIBLE_MODULES"
    assert placement.choose(1) == ([5], "")
    assert placement.choose(2) == ([], "1 module(s) free, 2 needed")
    placement.mark_busy("5")
    assert placement.choose(1) == ([], "0 module(s) free (1 held by other processes), 1 needed")
    assert Placement([0, 1], environ={"HLS_MODULE_ID": "1"}).choose(1) == ([1], "")
    with pytest.raises(ValueError, match="HABANA_VISIBLE_MODULES"):
        Placement([0, 1], environ={"HABANA_VISIBLE_MODULES": "zero"})


def test_placement_without_hl_smi_leaves_one_module_to_the_gaudi_software():
    placement = Placement(None, environ={})
    assert placement.choose(1) == (None, "")
    modules, why = placement.choose(2)
    assert modules == [] and "hl-smi cannot list the modules" in why


def test_placement_on_part_of_a_server_pairs_any_two_free_modules():
    assert Placement([1, 4, 5, 2], environ={}).choose(2) == ([4, 5], "")
    assert Placement([3, 6], environ={}).choose(2) == ([3, 6], "")


def test_scrub_replaces_other_variables_values_and_keeps_documented_ones():
    environ = {"MY_API_TOKEN": "tok-0123456789abcdef", "HOME": "/home/someone",
               "HPU_PLUGIN_EMULATE": "gaudi3", "SHORT": "abc", "HLS_MODULE_ID": "3",
               "HPU_PLUGIN_FAST_OPTIMIZER": "0", "PT_HPU_GPU_MIGRATION": "1",
               "HPU_PLUGIN_FP8_STATS": "/home/someone/stats/measure"}
    doc = {"tail": ["auth tok-0123456789abcdef failed", "/home/someone/x.py line 3 abc"],
           "env": documented_environment(environ)}
    clean = scrub(doc, environ)
    assert clean["tail"] == ["auth $MY_API_TOKEN failed", "$HOME/x.py line 3 abc"]
    # every setting a report needs to reproduce a run, the fast-path switches among them
    assert clean["env"] == {"HPU_PLUGIN_EMULATE": "gaudi3", "HLS_MODULE_ID": "3",
                            "HPU_PLUGIN_FAST_OPTIMIZER": "0", "PT_HPU_GPU_MIGRATION": "1",
                            "HPU_PLUGIN_FP8_STATS": "$HOME/stats/measure"}


def test_the_report_leaves_out_the_defaults_activation_exported(monkeypatch):
    from hpu_plugin.patching import environ_entry, this_process

    name = "HPU_PLUGIN_TEST_EXPORTED_DEFAULT"
    monkeypatch.setenv(name, "1")
    assert documented_environment()[name] == "1"  # the user's setting
    # the same variable as activation exports a Gaudi default (Patches.setenv records it)
    monkeypatch.setattr(this_process.environment, "made",
                        [*this_process.environment.made, environ_entry(name)])
    assert name not in documented_environment()


def test_unknown_check_names_are_refused_with_the_choices():
    assert [c.name for c in catalog.select(["numerics", "detect"], None)] == [
        "detect", "numerics"]
    assert "hccl" not in [c.name for c in catalog.select(None, ["hccl"])]
    with pytest.raises(ValueError, match="detect, reference-page"):
        catalog.select(["nope"], None)


def test_table_has_one_line_per_check_and_the_exit_status():
    doc = {"checks": [{"name": "detect", "status": "pass", "seconds": 1.25, "reason": "ok"},
                      {"name": "hccl", "status": "cannot-run", "seconds": 0.0,
                       "reason": "1 module(s) free, 2 needed\nsecond line"}],
           "seconds": 3.0, "exit_status": 0, "problem": ""}
    lines = table(doc).splitlines()
    assert lines[1].split() == ["detect", "PASS", "1.2s", "ok"]
    assert "CANNOT RUN" in lines[2] and lines[2].endswith("2 needed second line")
    assert lines[-1] == "1 pass, 1 cannot run in 3 s; exit 0"
