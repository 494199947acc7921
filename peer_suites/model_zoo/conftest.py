"""The device of the run: ``hpu`` in the peer suites' hpu run (the emulated Gaudi through the
plugin), ``cpu`` in the CPU run, chosen as the hosts choose it."""

from __future__ import annotations

import pytest
import torch


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "full: only in `python -m peer_suites run --subset full`")


@pytest.fixture(scope="session")
def device() -> str:
    hpu = getattr(torch, "hpu", None)
    return "hpu" if hpu is not None and hpu.is_available() else "cpu"
