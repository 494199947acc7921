"""A refusal raised in a worker must reach the process that reports it whole: Ray Train's
controller, multiprocessing pools and launchers carry a worker's exception across by
pickle, and an error Python cannot rebuild from its message arrives as "Failed to
deserialize exception" instead of naming the variable and the fix."""

from __future__ import annotations

import multiprocessing
import pickle

import pytest

from hpu_emulator.errors import EmulationError
from hpu_plugin.emulator import EmulatorError
from hpu_plugin.errors import HpuPluginError, Refusal, SettingError
from hpu_plugin.gaudi import environment, modes, preflight, selection, visibility
from hpu_plugin.gaudi.config_error import GaudiConfigError
from hpu_plugin.switches import Selection

MODULES = (environment, modes, preflight, selection, visibility)  # where the subclasses live


def _every_subclass(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_every_subclass(sub)]
    return found


ERRORS = [GaudiConfigError, *_every_subclass(GaudiConfigError)]


def test_the_gaudi_rules_error_types_are_all_checked():
    names = {cls.__name__ for cls in ERRORS}
    assert {"PreflightError", "PlacementError", "VisibilityError", "CompileModeError",
            "EnvironmentValueError"} <= names


@pytest.mark.parametrize("cls", ERRORS, ids=lambda cls: cls.__name__)
def test_a_gaudi_refusal_survives_pickle_with_its_fields(cls):
    error = cls("PT_ENABLE_INT64_SUPPORT", "0", "the same value on every rank", "set it alike",
                problem="node 'b' (node rank 1), rank 2 differs from rank 0")
    error.add_note("raised by rank 2")
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is cls
    assert str(back) == str(error)
    assert back.__notes__ == ["raised by rank 2"]
    assert (back.variable, back.value, back.supported, back.fix, back.problem) == (
        error.variable, error.value, error.supported, error.fix, error.problem)


@pytest.mark.parametrize("cls", [EmulationError, EmulatorError], ids=lambda cls: cls.__name__)
def test_the_emulator_errors_are_the_plugins_and_survive_pickle(cls):
    error = cls("HPU_PLUGIN_EMULATE='gaudi9' is not a Gaudi; fix: gaudi2 or gaudi3")
    back = pickle.loads(pickle.dumps(error))
    assert isinstance(back, HpuPluginError) and type(back) is cls
    assert str(back) == str(error)


def test_a_setting_error_survives_pickle_with_its_fields():
    error = SettingError("HPU_PLUGIN_PREFLIGHT_TIMEOUT", "soon", "a number of seconds")
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is SettingError and str(back) == str(error)
    assert (back.variable, back.value, back.accepted, back.fix) == (
        error.variable, error.value, error.accepted, error.fix)


def test_a_switch_error_survives_pickle_with_its_fields():
    with pytest.raises(SettingError) as caught:
        Selection.from_environ({"HPU_PLUGIN_DISABLE": "a,1"})
    back = pickle.loads(pickle.dumps(caught.value))
    assert type(back) is SettingError and str(back) == str(caught.value)
    assert (back.variable, back.value) == ("HPU_PLUGIN_DISABLE", "a,1")


class ThirdPartyRefusal(Refusal):
    """A plugin's own refusal, with a signature of its own (keyword-only fields)."""

    def __init__(self, *, device_map: str, limit: int) -> None:
        self.device_map, self.limit = device_map, limit
        super().__init__(f"device_map={device_map!r} needs more than {limit} GiB; fix: ...")


def test_any_refusal_survives_pickle_whatever_its_init_takes():
    error = ThirdPartyRefusal(device_map="auto", limit=96)
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is ThirdPartyRefusal and str(back) == str(error)
    assert (back.device_map, back.limit) == ("auto", 96)


def _refuse(_: int) -> None:
    raise preflight.PreflightError("PT_HPU_LAZY_MODE", "1", "the same value on every rank",
                                   preflight.FIXES["PT_HPU_LAZY_MODE"], problem="rank 1 differs")


def test_a_refusal_in_a_pool_worker_reaches_the_parent_as_itself():
    """An exception a pool cannot unpickle leaves ``Pool.map`` waiting for ever; the bound
    turns that into a failure of this test."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        with pytest.raises(preflight.PreflightError) as caught:
            pool.map_async(_refuse, [0]).get(timeout=60)
    assert caught.value.variable == "PT_HPU_LAZY_MODE"
    assert "Fix: set PT_HPU_LAZY_MODE to the same value on every node" in str(caught.value)
