"""A rank that dies: the job ends, bounded, naming the failed rank; the surviving rank is
not left waiting forever in the plugin's collectives or its shutdown."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from .conftest import environ

SCRIPT = """
import os, sys
import torch
import torch.distributed as dist
rank = int(os.environ["RANK"])
if rank == 1 and {when!r} == "before init":
    sys.exit(3)
dist.init_process_group()
if rank == 1 and {when!r} == "after init":
    os._exit(3)
dist.all_reduce(torch.ones(1, device="hpu"))
dist.barrier()
print("rank", rank, "done", flush=True)
"""


@pytest.mark.parametrize("when", ["before init", "after init"])
def test_a_dying_rank_ends_the_job_with_its_rank_named(tmp_path, when):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(SCRIPT.format(when=when)))
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         "--monitor_interval", "0.5", str(script)],
        env=environ(HPU_PLUGIN_EMULATE="1", HPU_PLUGIN_EMULATE_DEVICES="2"),
        capture_output=True, text=True, timeout=240, cwd=tmp_path,
    )
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "rank 1 done" not in output
    assert "local_rank: 1" in output and "exitcode  : 3" in output, output[-3000:]
