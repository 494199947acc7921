"""Post-import hooks fire once a module has executed, whatever the import order."""

from __future__ import annotations

import importlib
import logging
import sys
import textwrap
import uuid

import pytest

from hpu_plugin import importhook


@pytest.fixture
def modules(tmp_path, monkeypatch):
    """Write modules under a unique package name; yields (package, write)."""
    package = f"hookpkg_{uuid.uuid4().hex[:8]}"
    root = tmp_path / package
    root.mkdir()
    (root / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(name: str, body: str) -> str:
        (root / f"{name}.py").write_text(textwrap.dedent(body))
        return f"{package}.{name}"

    yield package, write
    importhook.remove()
    for name in [n for n in sys.modules if n.startswith(package)]:
        del sys.modules[name]


def test_fires_after_a_later_import_executes(modules):
    _, write = modules
    name = write("late", "VALUE = 41\n")
    seen = []
    importhook.when_imported(name, lambda m: seen.append(m.VALUE + 1))
    assert seen == []
    module = importlib.import_module(name)
    assert seen == [42]
    assert module.__loader__.__class__.__name__ != "_Loader"  # the real loader is handed back
    importlib.reload(module)
    assert seen == [42]  # once


def test_runs_at_once_for_a_module_already_imported(modules):
    _, write = modules
    name = write("early", "VALUE = 1\n")
    importlib.import_module(name)
    seen = []
    importhook.when_imported(name, lambda m: seen.append(m.VALUE))
    assert seen == [1]


def test_waits_for_a_module_that_is_mid_import(modules):
    """Like torch's autoload running while a host module is still executing."""
    package, write = modules
    seen: list[int] = []
    sys.modules["hookpkg_seen"] = seen  # type: ignore[assignment]
    try:
        write("registrar", f"""
            import sys
            from hpu_plugin import importhook
            importhook.when_imported(
                "{package}.host", lambda m: sys.modules["hookpkg_seen"].append(m.DEFINED_LATER)
            )
        """)
        host = write("host", f"""
            import {package}.registrar
            DEFINED_LATER = 7
        """)
        follower = write("follower", "")
        importlib.import_module(host)
        assert seen == []  # not while the host was still executing
        importlib.import_module(follower)  # the host's next import finds it finished
        assert seen == [7]
    finally:
        del sys.modules["hookpkg_seen"]


def test_a_failing_adapter_is_logged_and_the_import_goes_on(modules, caplog):
    _, write = modules
    name = write("victim", "VALUE = 3\n")

    def broken(module):
        raise RuntimeError("adapter bug")

    importhook.when_imported(name, broken)
    with caplog.at_level(logging.WARNING, logger="hpu_plugin"):
        module = importlib.import_module(name)
    assert module.VALUE == 3
    assert any("adapter bug" in r.getMessage() for r in caplog.records)


def test_a_missing_module_is_left_to_the_normal_error(modules):
    package, _ = modules
    importhook.when_imported(f"{package}.absent", lambda m: None)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"{package}.absent")
