"""The GPU Migration Toolkit's tests share the end-to-end tests' way of running a user's
program (a scrubbed environment, a subprocess, the emulator) and add the opt-in."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e.conftest import base_env, emulated_env, emulator, run  # noqa: F401  fixtures too

DATA = Path(__file__).parent / "data"
OPT_IN = {"PT_HPU_GPU_MIGRATION": "1"}


def migrated_env(tmp_path: Path, devices: int = 1, **extra: str) -> dict[str, str]:
    """The emulated Gaudi server with the toolkit asked for, as a user exports it."""
    return emulated_env(tmp_path, devices=devices, **OPT_IN, **extra)


#: The slowest runs: deselected unless asked for (``pytest tests/gpu_migration -m
#: migration_full``, the long-run command; its last results are in docs/gpu-migration.md).
FULL = "migration_full"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{FULL}: slow GPU-migration runs, the long-run command")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if FULL in (config.getoption("markexpr") or ""):
        return
    kept = [item for item in items if item.get_closest_marker(FULL) is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept
