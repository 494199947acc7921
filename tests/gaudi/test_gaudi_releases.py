"""The Gaudi software release table against the version strings real installations print:
``habana-torch-plugin 1.23.0.695``, torch ``2.9.0+hpu.1.23.0.695.git8598e6d`` (pip's form
of ``+hpu_1.23.0-695``), a PyPI torch, ``hl-smi``'s driver ``1.23.0-bd87f71``."""

from __future__ import annotations

import pytest

from hpu_plugin.gaudi import releases

GAUDI_TORCH = "2.9.0+hpu.1.23.0.695.git8598e6d"


def _errors(findings):
    return [f for f in findings if f.severity == "error"]


def test_a_matching_installation_has_no_error_or_warning():
    found = releases.check("1.23.0.695", GAUDI_TORCH, "1.23.0-bd87f71", "GAUDI3")
    assert {f.severity for f in found} == {"ok"}
    assert "ships torch 2.9.0" in found[0].message


@pytest.mark.parametrize("pypi", ["2.9.0", "2.11.0+cu130", "2.9.0+cpu"])
def test_a_pypi_torch_over_the_gaudi_build_is_an_error_with_the_fix(pypi):
    (error,) = _errors(releases.check("1.23.0.695", pypi, "1.23.0-bd87f71"))
    assert f"torch {pypi} is not a Gaudi build" in error.message
    assert "Gaudi software 1.23.0" in error.fix


def test_a_gaudi_torch_of_another_release_is_an_error():
    (error,) = _errors(releases.check("1.24.1.482", GAUDI_TORCH))
    assert "build of Gaudi software 1.23.0" in error.message
    assert "bridge (habana-torch-plugin) is of 1.24.1" in error.message


def test_a_driver_of_another_release_is_a_warning_naming_both_fixes():
    found = releases.check("1.23.0.695", GAUDI_TORCH, "1.22.2-32ab1c9")
    (warning,) = [f for f in found if f.severity == "warning"]
    assert "driver is 1.22.2-32ab1c9" in warning.message
    assert "driver and firmware of 1.23.0" in warning.fix
    assert "Gaudi software 1.22.2" in warning.fix


def test_first_generation_gaudi_on_a_release_without_it_is_an_error():
    (error,) = _errors(releases.check("1.22.0.740", "2.7.1+hpu.1.22.0.740.gitabc", None, "gaudi"))
    assert "does not support gaudi" in error.message
    assert "1.21.0" in error.fix


def test_a_patch_release_takes_its_line_and_an_unknown_release_is_said_so():
    assert releases.find("1.21.4").version == "1.21.0"
    assert releases.find("1.24.1").torch == "2.11.0"
    assert releases.find("1.18.0") is None
    found = releases.check("1.30.0.12", "2.15.0+hpu.1.30.0.12.git1")
    assert found[0].severity == "info" and "not in the releases" in found[0].message
    assert not _errors(found)


def test_no_gaudi_software_means_no_findings():
    assert releases.check(None, "2.13.0") == []


def test_versions_are_read_from_each_form():
    assert releases.torch_release("2.9.0+hpu_1.23.0-695.git8598e6d") == ("2.9.0", "1.23.0")
    assert releases.torch_release("2.13.0+cpu") == ("2.13.0", None)
    assert releases.software_release("1.20.0-bd87f71") == "1.20.0"
    assert releases.software_release("emulated") is None


def test_the_firmware_is_checked_against_the_release_as_the_driver_is(tmp_path):
    """``hl-smi -v`` names the firmware with its release (``hl-1.23.0-fw-62.1.0``); one of
    another release is a warning whose fix flashes the software's firmware."""
    from hpu_plugin import machine
    from hpu_plugin.gaudi.hlsmi import format_version

    tool = tmp_path / "hl-smi"
    for software, firmware in (("1.23.0", "62.1.0"), ("1.22.2", "61.3.2")):
        line = format_version(software, firmware, "Oct 10 2025 - 12:00:00")
        tool.write_text(f"#!/bin/sh\nprintf '%s' '{line}'\n")
        tool.chmod(0o755)
        read = machine.firmware_version(timeout=30, executable=str(tool))
        assert read == f"{software}-fw-{firmware}"
        found = releases.check("1.23.0.695", GAUDI_TORCH, "1.23.0-bd87f71", "GAUDI3", read)
        warnings = [f for f in found if f.severity == "warning"]
        if software == "1.23.0":
            assert warnings == [] and "firmware 1.23.0-fw-62.1.0 matches" in found[-1].message
        else:
            (warning,) = warnings
            assert "firmware is 1.22.2-fw-61.3.2" in warning.message
            assert "hl-fw-loader" in warning.fix and "Gaudi software 1.22.2" in warning.fix
    tool.write_text("#!/bin/sh\necho no version here\n")
    assert machine.firmware_version(timeout=30, executable=str(tool)) is None
    (warning,) = releases.check("1.23.0.695", GAUDI_TORCH, firmware="fw-61")[1:]
    assert "cannot read a release from the firmware version" in warning.message
