"""The one undo mechanism for what activation changes in the process: ``Patches`` records
environment variables as it records attributes, and undoes them in reverse order, each back
to what it was."""

from __future__ import annotations

import os

from hpu_plugin.activation import _export_defaults
from hpu_plugin.hookspecs import hookimpl
from hpu_plugin.loader import PluginRecord
from hpu_plugin.patching import Patches, this_process
from hpu_plugin.registry import Registry


def test_environment_changes_are_undone_back_to_what_was_there(monkeypatch) -> None:
    monkeypatch.delenv("HPU_TEST_NEW", raising=False)
    monkeypatch.setenv("HPU_TEST_USERS", "theirs")
    patches = Patches()
    patches.setenv("HPU_TEST_NEW", "1")
    patches.setenv("HPU_TEST_USERS", "ours")
    assert (os.environ["HPU_TEST_NEW"], os.environ["HPU_TEST_USERS"]) == ("1", "ours")
    assert patches.made == ["os.environ['HPU_TEST_NEW']", "os.environ['HPU_TEST_USERS']"]
    patches.undo()
    assert "HPU_TEST_NEW" not in os.environ
    assert os.environ["HPU_TEST_USERS"] == "theirs"
    assert patches.made == []


class _Pushy:
    """A plugin whose hook overrides, removes and mistypes, against the spec's setdefault."""

    @hookimpl
    def hpu_prepare_environment(self, environ):
        environ["HPU_TEST_USERS"] = "ours"
        environ.pop("HPU_TEST_GONE", None)
        environ["HPU_TEST_NUMBER"] = 1
        environ.setdefault("HPU_TEST_NEW", "1")


def test_hooks_only_add_text_defaults_and_the_users_variables_stay(monkeypatch, caplog):
    for name in ("HPU_TEST_NEW", "HPU_TEST_NUMBER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HPU_TEST_USERS", "theirs")
    monkeypatch.setenv("HPU_TEST_GONE", "kept")
    registry = Registry()
    registry.register(_Pushy(), PluginRecord("pushy", "tests:pushy", "tests", "0",
                                             first_party=False))
    try:
        assert _export_defaults(registry) == ["HPU_TEST_NEW"]
        assert (os.environ["HPU_TEST_USERS"], os.environ["HPU_TEST_GONE"]) == ("theirs", "kept")
        assert "HPU_TEST_NUMBER" not in os.environ
        warned = " ".join(r.getMessage() for r in caplog.records)
        assert all(n in warned for n in ("HPU_TEST_USERS", "HPU_TEST_GONE", "HPU_TEST_NUMBER"))
    finally:
        this_process.environment.undo()
    assert "HPU_TEST_NEW" not in os.environ


class _Layer:
    def forward(self) -> str:
        return "class"


def test_an_objects_own_attributes_are_undone_and_the_object_is_held_weakly() -> None:
    import gc
    import types
    import weakref

    patches = Patches()
    layers = [_Layer(), _Layer()]
    own = types.MethodType(lambda self: "its own", layers[1])
    layers[1].forward = own
    for layer in layers:
        patches.set_on_instance(layer, "forward", types.MethodType(lambda self: "ours", layer))
    assert [layer.forward() for layer in layers] == ["ours", "ours"]
    assert patches.made == ["_Layer.forward of each object given it"]  # once, for both
    gone = _Layer()
    patches.set_on_instance(gone, "forward", types.MethodType(lambda self: "ours", gone))
    freed = weakref.ref(gone)
    del gone, own
    gc.collect()
    assert freed() is None  # patching an object does not keep it alive
    patches.undo()
    assert "forward" not in vars(layers[0])
    assert [layer.forward() for layer in layers] == ["class", "its own"]
    assert patches.made == []


def test_an_object_change_with_its_own_undo() -> None:
    patches = Patches()
    layer = _Layer()
    patches.set_on_instance(layer, "kept", 1, restore=lambda obj: setattr(obj, "kept", 0))
    assert layer.kept == 1  # type: ignore[attr-defined]
    patches.undo()
    assert layer.kept == 0  # type: ignore[attr-defined]
