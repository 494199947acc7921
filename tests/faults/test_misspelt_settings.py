"""A misspelt ``HPU_PLUGIN_*`` variable would be ignored, and the setting its writer meant
would not apply (``HPU_PLUGIN_DISABLED=1`` leaves the plugin on): ``import torch`` refuses it
by name with the right spelling, with or without emulation, and the list of known names the
check compares against is every name the sources read."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from processes import emulated, run_python, scrubbed

from hpu_plugin.gaudi import tuning

ROOT = Path(__file__).resolve().parents[2]
PROBE = "import json, torch\nfrom hpu_plugin import state\nprint(json.dumps(state))"


@pytest.mark.parametrize("typo, meant, emulate", [
    ("HPU_PLUGIN_DISABLED", "HPU_PLUGIN_DISABLE", True),
    ("HPU_PLUGIN_EMULATE_DEVICE", "HPU_PLUGIN_EMULATE_DEVICES", True),
    ("HPU_PLUGIN_GRAPH_MAX", "HPU_PLUGIN_GRAPHS_MAX", True),
    ("HPU_PLUGIN_EMULAT", "HPU_PLUGIN_EMULATE", False),  # no Gaudi: it meant emulation on
])
def test_a_misspelt_variable_is_refused_naming_the_right_one(typo, meant, emulate):
    env = emulated(**{typo: "2"}) if emulate else scrubbed(**{typo: "1"})
    done = run_python(PROBE, env, timeout=300, check=True)
    state = json.loads(done.stdout.strip().splitlines()[-1])
    assert state["status"] == "failed", state
    assert f"{typo} is no setting of hpu-plugin (did you mean {meant}?)" in state["reason"]
    assert f"{typo} is no setting" in done.stderr  # said, not only recorded


def test_other_tools_variables_and_known_ones_pass():
    env = scrubbed(HPU_PLUGIN_CACHE_DIR="/tmp", HPU_PLUGIN_PEER_SOURCE="x")
    state = json.loads(run_python(PROBE, env, timeout=300, check=True).stdout.splitlines()[-1])
    assert state["status"] == "skipped", state


def test_the_known_names_are_every_name_the_sources_read():
    named = set()
    for folder in ("hpu_plugin", "packages/hpu-emulator/hpu_emulator"):
        for path in (ROOT / folder).rglob("*.py"):
            named |= set(re.findall(r"[\"'](HPU_PLUGIN_[A-Z0-9_]+)[\"']", path.read_text()))
    known = {*tuning.OTHER_VARIABLES, *tuning.names(), *tuning.FAMILIES}
    assert named - known == set()
    assert set(tuning.OTHER_VARIABLES) - named == set()  # none listed that nothing reads
