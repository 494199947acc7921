"""``PT_HPU_METRICS_FILE``: the global metrics written to a file as the bridge's
``MetricSaver`` writes them (``habana_frameworks/torch/hpu/metrics/saver.py``), the way
Gaudi's guides have users collect graph compilations from an unchanged script."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

#: A compiled function run at two shapes: two graph compilations.
SCRIPT = """
import torch
f = torch.compile(lambda x: (x * 2).sum(), dynamic=False)
f(torch.ones(4, device="hpu")); f(torch.ones(8, device="hpu"))
from habana_frameworks.torch.hpu.metrics import metric_global
print(dict(metric_global("graph_compilation").stats())["TotalNumber"])
"""


def test_the_metrics_are_written_at_exit_and_a_second_run_gets_a_file_of_its_own(
        run, tmp_path: Path):
    target = tmp_path / "metrics" / "run.json"
    env = {"PT_HPU_METRICS_FILE": str(target)}
    compiled = int(run(SCRIPT, env).stdout.split()[-1])
    records = json.loads(target.read_text())
    by_name = {record["metric_name"]: record for record in records}
    assert {"graph_compilation", "cpu_fallback", "memory_defragmentation"} <= set(by_name)
    assert all(record["triggered_by"] == "process_exit" for record in records)
    assert by_name["graph_compilation"]["statistics"]["TotalNumber"] == compiled >= 2
    run(SCRIPT, env)  # the first run's file is kept; the second writes run.json.1
    assert json.loads(target.read_text()) == records
    assert json.loads((tmp_path / "metrics" / "run.json.1").read_text())


def test_each_change_in_text_and_one_file_per_rank(run, tmp_path: Path):
    target = tmp_path / "metrics.txt"
    run(SCRIPT, {"PT_HPU_METRICS_FILE": str(target), "PT_HPU_METRICS_FILE_FORMAT": "text",
                 "PT_HPU_METRICS_DUMP_TRIGGERS": "metric_change", "RANK": "0"})
    text = (tmp_path / "metrics-rank0.txt").read_text()
    blocks = [block for block in text.split("\n\n") if block.strip()]
    assert len(blocks) >= 2 and not target.exists()
    assert all(block.startswith("Metric name: graph_compilation\nTriggered by: metric_change\n")
               for block in blocks), text
    assert "\tTotalNumber: 1\n" in text and "\tTotalNumber: 2\n" in text


@pytest.mark.parametrize(("name", "value"), [("PT_HPU_METRICS_FILE_FORMAT", "yaml"),
                                             ("PT_HPU_METRICS_DUMP_TRIGGERS", "exit")])
def test_an_unknown_format_or_trigger_is_refused_with_the_fix(run, tmp_path: Path, name, value):
    done = run("import torch; print(torch.hpu.is_available() if hasattr(torch, 'hpu') else 0)",
               {"PT_HPU_METRICS_FILE": str(tmp_path / "m.json"), name: value})
    assert f"{name}={value!r}" in done.stderr and "fix:" in done.stderr, done.stderr
    assert not (tmp_path / "m.json").exists()


def test_the_user_trigger_is_one_the_bridge_knows(run, tmp_path: Path):
    """hpu/metrics/saver.py: ``MetricDumpTrigger`` has ``user`` beside the three others."""
    done = run("import torch; print('available', torch.hpu.is_available())",
               {"PT_HPU_METRICS_FILE": str(tmp_path / "m.json"),
                "PT_HPU_METRICS_DUMP_TRIGGERS": "process_exit,user"})
    assert "available True" in done.stdout, done.stderr


@pytest.mark.parametrize(("name", "expected"), [
    ("m.json", "m-rank3.json"), ("/a/b.c/m.txt", "/a/b.c/m-rank3.txt"),
    ("/home/u/my.project/metrics", "/home/u/my.project/metrics-rank3"),
    ("./metrics", "./metrics-rank3"),
])
def test_the_rank_goes_into_the_file_name_not_the_directory(monkeypatch, name, expected):
    from hpu_emulator import metrics

    monkeypatch.setenv("RANK", "3")
    assert metrics._rank_name(name) == expected
