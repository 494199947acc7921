"""A pytest plugin that seeds torch before each host test, from the test's node id.

torch seeds its generators from the system's entropy in every process, so a host test that
draws random numbers without seeding them sees other numbers on every run. Some assert
properties that then hold only most of the time: Accelerate's ``test_save_load_model``
(``tests/test_accelerator.py``) checks that two fresh ``torch.nn.Linear(2, 4)`` differ by
more than 1e-3 in the sum of their absolute weights, which fails on about one run in a
thousand, on either device. Seeded from the node id, each test draws the same numbers on the
CPU run and the hpu run, and on every run, so a difference between the two is the device's.
Loaded into the host suites' pytest runs with ``-p peer_suites.seeding``.
"""

from __future__ import annotations

import sys
import zlib

import pytest


def pytest_runtest_setup(item: pytest.Item) -> None:
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(zlib.crc32(item.nodeid.encode()))
