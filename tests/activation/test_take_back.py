"""The one undo mechanism for what activation changes in the process: ``Patches`` records
environment variables and ``sys.path`` entries as it records attributes, and undoes them
in reverse order, each back to what it was."""

from __future__ import annotations

import os
import sys

from hpu_plugin.patching import Patches


def test_environment_changes_are_undone_back_to_what_was_there(monkeypatch) -> None:
    monkeypatch.delenv("HPU_TEST_NEW", raising=False)
    monkeypatch.setenv("HPU_TEST_USERS", "theirs")
    monkeypatch.setenv("HPU_TEST_GONE", "kept")
    patches = Patches()
    patches.setenv("HPU_TEST_NEW", "1")
    patches.setenv("HPU_TEST_USERS", "ours")
    patches.unsetenv("HPU_TEST_GONE")
    patches.unsetenv("HPU_TEST_NEVER_SET")  # nothing to take away, nothing recorded
    assert (os.environ["HPU_TEST_NEW"], os.environ["HPU_TEST_USERS"]) == ("1", "ours")
    assert "HPU_TEST_GONE" not in os.environ
    assert patches.made == ["os.environ['HPU_TEST_NEW']", "os.environ['HPU_TEST_USERS']",
                            "del os.environ['HPU_TEST_GONE']"]
    patches.undo()
    assert "HPU_TEST_NEW" not in os.environ
    assert (os.environ["HPU_TEST_USERS"], os.environ["HPU_TEST_GONE"]) == ("theirs", "kept")
    assert patches.made == []


def test_a_path_entry_is_withdrawn_with_the_modules_found_there(tmp_path) -> None:
    (tmp_path / "hpu_test_standin.py").write_text("VALUE = 1\n")
    entry = str(tmp_path)
    patches = Patches()
    patches.add_path(entry)
    patches.add_path(entry)  # already there: recorded once
    try:
        import hpu_test_standin  # type: ignore[import-not-found]

        assert hpu_test_standin.VALUE == 1
        assert patches.made == [f"sys.path += {entry!r}"]
    finally:
        patches.undo()
    assert entry not in sys.path
    assert "hpu_test_standin" not in sys.modules
