"""Settings of the developer's or CI's shell must not leak into the tests.

Every test that starts a user's program copies this process's environment; a
``HPU_PLUGIN_EMULATE`` or ``HABANA_VISIBLE_MODULES`` exported in the shell would change
what those programs see. They are removed once, before anything imports torch, so each
test sets exactly what it means.
"""

from __future__ import annotations

import os

import pytest

#: Prefixes and names of the settings the plugin, Gaudi and the launchers read.
PREFIXES = ("HPU_PLUGIN_", "HABANA_", "PT_HPU_", "PT_ENABLE_", "ACCELERATE_", "HPU_TEST_")
NAMES = {"HLS_MODULE_ID", "ID", "LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
         "MASTER_ADDR", "MASTER_PORT", "TORCH_DEVICE_BACKEND_AUTOLOAD"}
#: Where the emulator's compiled runtime is cached: sharing it saves a build per test.
KEEP = {"HPU_PLUGIN_CACHE_DIR"}


def pytest_configure(config: pytest.Config) -> None:
    for name in list(os.environ):
        if name not in KEEP and (name in NAMES or name.startswith(PREFIXES)):
            del os.environ[name]
