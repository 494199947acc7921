"""Harness switches for a library's own tests run from a checkout of its repository.

Loaded with ``-p peer_suites.checkout_tests`` into both runs (CPU and hpu), so it changes no
comparison. diffusers 0.42.1 takes any installed ``optimum`` for optimum-quanto
(``diffusers/utils/import_utils.py``: ``_is_package_available("optimum", get_dist_name=True)``
answers for the ``optimum`` distribution), and its model tests' common module then imports
``optimum.quanto`` and fails to collect; ``optimum`` is installed here without quanto (the
sentence-transformers tests need it). The claim is corrected when ``optimum.quanto`` is absent.
"""

from __future__ import annotations

import importlib.util

import pytest


def _quanto_installed() -> bool:
    try:
        return importlib.util.find_spec("optimum.quanto") is not None
    except (ImportError, ValueError):
        return False


def pytest_configure() -> None:
    if importlib.util.find_spec("diffusers") is None or _quanto_installed():
        return
    from diffusers.utils import import_utils

    import_utils._optimum_quanto_available = False  # type: ignore[attr-defined]


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """A test module that cannot be imported is an error of that module in the outcomes (the
    run goes on with ``--continue-on-collection-errors``): an older checkout's test may
    import what the installed release moved."""
    if report.failed:
        from peer_suites import outcomes

        message = str(report.longrepr).strip().splitlines()[-1][:300] if report.longrepr else ""
        outcomes.record(report.nodeid, "error", f"collection: {message}")
