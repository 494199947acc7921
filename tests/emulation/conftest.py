"""Helpers for the emulator tests: user scripts run in fresh interpreters, as a user runs them.

The scripts never import hpu_plugin; the emulator comes in through ``import torch`` (the
``torch.backends`` entry point). The C++ runtime is built once per session, before the first
script, so no test pays (or times out on) the build.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping

import pytest

BUILD_TIMEOUT = 900
RUN_TIMEOUT = 300

#: Variables of the parent environment that would change what a test script sees.
_SCRUB = (
    "HPU_PLUGIN_EMULATE", "HPU_PLUGIN_EMULATE_DEVICES", "HPU_PLUGIN_EMULATE_MODULES",
    "HPU_PLUGIN_EMULATE_MEMORY", "HPU_PLUGIN_DISABLE", "HABANA_VISIBLE_MODULES",
    "HABANA_VISIBLE_DEVICES", "HLS_MODULE_ID", "LOCAL_RANK", "RANK", "WORLD_SIZE",
    "PT_ENABLE_INT64_SUPPORT", "PT_HPU_LAZY_MODE", "MASTER_ADDR", "MASTER_PORT",
)


def script_env(extra: Mapping[str, str] | None = None, *, emulate: str | None = "1") -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
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
    proc = subprocess.run(
        args or [sys.executable, "-c", textwrap.dedent(script)],
        env=script_env(extra_env, emulate=emulate),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        pytest.fail(
            f"script failed ({proc.returncode})\n--- stdout\n{proc.stdout[-4000:]}\n"
            f"--- stderr\n{proc.stderr[-6000:]}"
        )
    return proc


@pytest.fixture(scope="session")
def emulator_built() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "hpu_plugin.emulation", "build"],
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
