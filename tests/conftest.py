"""Settings of the developer's or CI's shell must not leak into the tests.

Every test that starts a user's program copies this process's environment; a
``HPU_PLUGIN_EMULATE`` or ``HABANA_VISIBLE_MODULES`` exported in the shell would change
what those programs see. They are removed once, before anything imports torch, so each
test sets exactly what it means.
"""

from __future__ import annotations

import os

import pytest
from processes import KEEP, NAMES, PREFIXES


def pytest_configure(config: pytest.Config) -> None:
    for name in list(os.environ):
        if name not in KEEP and (name in NAMES or name.startswith(PREFIXES)):
            del os.environ[name]
