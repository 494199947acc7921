"""``hpu-plugin selftest`` end to end on the emulator, as a user runs it: every check passes,
the report holds what a bug report needs and no secret, and injected faults (a hang, a
failure, a crash, a module another process holds) give the documented results."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from processes import scrubbed

from hpu_plugin.selftest import catalog, runner

pytestmark = pytest.mark.e2e

SECRET = "s3cr3t-" + uuid.uuid4().hex


def selftest(tmp_path: Path, *args: str, emulate: bool = True, **extra: str) -> tuple[int, dict]:
    # scrubbed: settings that other tests of this process made (the plugin's Gaudi
    # defaults, exported where a test activated it in-process) must not reach the report
    env = scrubbed(HF_HOME=str(tmp_path / "hf"), OMP_NUM_THREADS="1",
                   MY_SERVICE_API_TOKEN=SECRET, **extra)
    if emulate:
        env["HPU_PLUGIN_EMULATE"] = "1"
    report = tmp_path / "selftest.json"
    done = subprocess.run(
        [sys.executable, "-m", "hpu_plugin", "selftest", "--report", str(report), *args],
        env=env, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode in (0, 1, 2), done.stderr[-3000:]
    text = report.read_text() if report.exists() else "{}"
    assert SECRET not in text and SECRET not in done.stdout and SECRET not in done.stderr
    return done.returncode, {**json.loads(text), "stdout": done.stdout, "stderr": done.stderr,
                             "given": env}


def statuses(doc: dict) -> dict[str, str]:
    return {c["name"]: c["status"] for c in doc["checks"]}


@pytest.fixture(scope="module")
def full_run(tmp_path_factory) -> tuple[int, dict]:
    return selftest(tmp_path_factory.mktemp("full"))


#: The emulator's model of the Gaudi metrics API (habana_frameworks.torch.hpu.metrics).
EMULATED_METRICS = importlib.util.find_spec("hpu_emulator.metrics") is not None


def test_every_check_passes_on_the_emulator(full_run):
    code, doc = full_run
    expected = {name: "pass" for name in catalog.NAMES}
    expected["gpu-migration"] = "cannot-run"  # PT_HPU_GPU_MIGRATION is off: nothing to check
    if not EMULATED_METRICS:  # a Gaudi software without the metrics API: said, not failed
        expected["graph-compilations"] = "cannot-run"
        reason = next(c["reason"] for c in doc["checks"] if c["name"] == "graph-compilations")
        assert "metric_global('graph_compilation')" in reason, reason
    assert statuses(doc) == expected, doc["stdout"]
    assert code == 0
    lines = doc["stdout"].splitlines()
    assert lines[0].split()[:4] == ["check", "result", "time", "reason"]
    for name in catalog.NAMES:  # the table: one line per check, with its result and time
        label = expected[name].upper().replace("-", " ")
        assert any(re.fullmatch(rf"{name} +{label} +\d+\.\ds  \S.*", line) for line in lines), name
    assert "report written to" in lines[-1]


def test_the_report_has_what_a_bug_report_needs(full_run):
    _, doc = full_run
    assert doc["versions"]["torch"] and doc["versions"]["transformers"]
    assert doc["versions"]["accelerate"] and doc["versions"]["hpu-plugin"]
    assert doc["gaudi"]["software"] == "emulated"
    assert "version" in doc["gaudi"]["driver"]  # hl-smi -v
    assert {row["module_id"] for row in doc["gaudi"]["devices"]} == {str(m) for m in range(8)}
    assert doc["activation"]["status"] == "active"
    enabled = {p["name"] for p in doc["plugins"] if p["status"] == "enabled"}
    assert enabled >= {"device", "compile", "ddp", "quantization"}
    # the settings the run was given (the test's own recipe cache, the shared build cache)
    # and nothing else: not the secret, nor a default the plugin exported itself
    given = {"HPU_PLUGIN_EMULATE", "PT_HPU_RECIPE_CACHE_CONFIG", "HPU_PLUGIN_CACHE_DIR"}
    assert set(doc["environment"]) == given & set(doc["given"]), doc["environment"]
    assert doc["environment"]["HPU_PLUGIN_EMULATE"] == "1"
    for check in doc["checks"]:
        assert check["tail"], check["name"]
        assert check["seconds"] > 0
    by_name = {c["name"]: c for c in doc["checks"]}
    assert by_name["hccl"]["modules"] == "0,1"
    assert by_name["detect"]["details"]["generation"] == "GAUDI2"


def test_a_hanging_check_is_ended_at_its_limit_with_its_children(tmp_path):
    marker = uuid.uuid4().hex
    start = time.monotonic()
    code, doc = selftest(tmp_path, "--only", "detect", "--time-limit", "10",
                         HPU_PLUGIN_SELFTEST_FAULT="hang:detect", SELFTEST_MARKER=marker)
    assert code == 1
    (check,) = doc["checks"]
    assert check["status"] == runner.TIMEOUT
    assert "no result in 10 s" in check["reason"]
    assert "injected fault: detect hangs" in check["tail"]
    assert 10 <= check["seconds"] < 10 + 2 * runner.GRACE
    assert time.monotonic() - start < 200
    assert "TIMEOUT" in doc["stdout"]
    left = []  # the hanging check's own child (it inherits the marker) must be gone too
    for proc in Path("/proc").iterdir():
        try:
            if f"SELFTEST_MARKER={marker}".encode() in (proc / "environ").read_bytes():
                left.append(proc.name)
        except OSError:
            continue
    assert not left


def test_a_failing_or_crashing_check_exits_1_with_the_reason(tmp_path):
    code, doc = selftest(tmp_path, "--only", "detect", "--only", "compile", "--json",
                         HPU_PLUGIN_SELFTEST_FAULT="fail:detect,crash:compile")
    assert code == 1
    by_name = {c["name"]: c for c in doc["checks"]}
    assert by_name["detect"]["status"] == "fail"
    assert "injected fault: detect fails" in by_name["detect"]["reason"]
    assert by_name["compile"]["status"] == runner.ERROR
    assert "killed by signal 6" in by_name["compile"]["reason"]
    assert json.loads(doc["stdout"])["exit_status"] == 1  # --json prints the document


def test_a_held_module_is_skipped_and_a_pair_that_cannot_be_had_says_why(tmp_path):
    code, doc = selftest(tmp_path, "--only", "detect", "--only", "hccl",
                         HPU_PLUGIN_SELFTEST_FAULT="busy:0", HABANA_VISIBLE_MODULES="0,1")
    by_name = {c["name"]: c for c in doc["checks"]}
    assert by_name["detect"]["status"] == "pass", by_name["detect"]
    assert by_name["detect"]["modules"] == "1"
    assert by_name["hccl"]["status"] == "cannot-run"
    assert by_name["hccl"]["reason"] == "1 module(s) free (1 held by other processes), 2 needed"
    assert doc["placement"]["busy"] == [0]
    assert code == 0  # a check that cannot run is not a failure


def test_without_gaudi_or_emulation_the_checks_cannot_run(tmp_path):
    code, doc = selftest(tmp_path, emulate=False)
    assert code == 2
    assert doc["checks"] == [] and "HPU_PLUGIN_EMULATE" in doc["problem"]
    assert "no Gaudi here" in doc["stdout"]


@pytest.mark.parametrize(
    ("args", "extra", "message"),
    [(["--only", "nope"], {}, "unknown check 'nope'"),
     ([], {"HPU_PLUGIN_SELFTEST_FAULT": "explode:detect"}, "HPU_PLUGIN_SELFTEST_FAULT"),
     (["--time-limit", "0"], {}, "--time-limit 0")],
)
def test_bad_input_is_refused_before_any_check_runs(tmp_path, args, extra, message):
    code, doc = selftest(tmp_path, *args, **extra)
    assert code == 2 and message in doc["stderr"]
