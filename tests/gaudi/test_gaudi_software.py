"""Telling the emulator's stand-ins from the real Gaudi software: by the marker file."""

from __future__ import annotations

import importlib.util
import sys

from hpu_plugin.gaudi.software import STANDIN_MARKER, is_standin, real_gaudi_installed


def test_a_package_with_the_marker_is_a_stand_in(tmp_path) -> None:
    package = tmp_path / "habana_frameworks"
    package.mkdir()
    (package / "__init__.py").write_text("")
    assert not is_standin(str(package))
    (package / STANDIN_MARKER).write_text("")
    assert is_standin(str(package)) and is_standin(str(package / "__init__.py"))


def test_the_emulator_s_stand_ins_carry_the_marker() -> None:
    from hpu_emulator.runtime import STANDINS

    for name in ("habana_frameworks", "intel_transformer_engine"):
        assert is_standin(str(STANDINS / name)), name


def test_stand_ins_on_the_path_are_not_the_real_software(monkeypatch) -> None:
    from hpu_emulator.runtime import STANDINS

    monkeypatch.setattr(sys, "path", [*sys.path, str(STANDINS)])
    importlib.invalidate_caches()
    assert importlib.util.find_spec("habana_frameworks") is not None
    assert real_gaudi_installed() is False
