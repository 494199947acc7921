"""Helpers for the emulator tests: user scripts run in fresh interpreters, as a user runs them.

The scripts never import hpu_plugin; the emulator comes in through ``import torch`` (the
``torch.backends`` entry point). The C++ runtime is built once per session, before the first
script, so no test pays (or times out on) the build.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Mapping

import processes
import pytest
from processes import scrubbed

BUILD_TIMEOUT = 900
RUN_TIMEOUT = 300

def script_env(extra: Mapping[str, str] | None = None, *, emulate: str | None = "1") -> dict:
    env = scrubbed()
    env["PYTHONUNBUFFERED"] = "1"
    env["TOKENIZERS_PARALLELISM"] = "false"
    env["HF_HUB_OFFLINE"] = "1"
    if emulate is not None:
        env["HPU_PLUGIN_EMULATE"] = emulate
    env.update(extra or {})
    return env


def run_script(
    script: str,
    extra_env: Mapping[str, str] | None = None,
    *,
    emulate: str | None = "1",
    timeout: float = RUN_TIMEOUT,
    args: list[str] | None = None,  # a command to run instead of the script
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    argv = args or [sys.executable, "-c", textwrap.dedent(script)]
    return processes.run(argv, script_env(extra_env, emulate=emulate), timeout, check=check)


@pytest.fixture(scope="session")
def emulator_built() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "hpu_emulator", "build"],
        env=script_env(emulate=None),
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    if proc.returncode != 0:
        pytest.fail(f"building the emulator failed:\n{proc.stderr[-6000:]}")


@pytest.fixture
def run(emulator_built: None):
    return run_script
