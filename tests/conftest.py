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


#: The mark of the tests that pip-install plugin distributions into this environment: while
#: they are installed, every process the other tests start loads them, so these tests cannot
#: run beside others (``-n``). Under ``-n`` they are left out, and ``--only-installs`` runs
#: them alone afterwards (``.ci/steps/20-suite.sh`` runs both).
INSTALLS = "installs"
#: The fixtures that install them: a test using one, directly or through another, is marked.
INSTALLING_FIXTURES = frozenset({"installed_examples", "fault_plugins", "override_plugin"})


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--only-installs", action="store_true",
        help="run only the tests that pip-install plugin distributions (marked 'installs'); "
             "they are left out of a parallel run (-n)",
    )


def _parallel(config: pytest.Config) -> bool:
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT") or getattr(
        config.option, "numprocesses", None
    )
    return str(workers or "0") not in ("0", "1")


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects, so that ``-m installs`` works too
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if INSTALLING_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(INSTALLS)
    only = config.getoption("--only-installs")
    if not only and not _parallel(config):
        return
    keep, dropped = [], []
    for item in items:
        (keep if (item.get_closest_marker(INSTALLS) is not None) == only else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    if _parallel(config) and not config.getoption("--only-installs"):
        terminalreporter.write_line(
            f"tests marked {INSTALLS!r} were left out of this parallel run: they change this "
            "environment for every process; run them with `pytest --only-installs`"
        )
