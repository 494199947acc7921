"""The Intel Gaudi software releases: which torch, driver and Gaudi generations go together.

A Gaudi software release pins its parts together: the driver and firmware, the bridge
(``habana-torch-plugin``) and a torch built for it. A torch from PyPI installed over the Gaudi
build, or a driver of another release, is the mismatch Gaudi users meet most; ``hpu-plugin
doctor`` reads the installed versions and checks them against this table.

Sources, each release's row: Intel's "Support Matrix" pages (docs.habana.ai,
``Support_Matrix/Support_Matrix_v1.19.0.html``, ``..._v1.21.0.html``, ``..._v1.22.0.html``,
and ``Support_Matrix.html`` for 1.23.0) for torch, generations and the Transformers /
optimum-habana pair; for 1.24.0 and 1.24.1, the Intel Gaudi support matrix as quoted by the
vLLM Gaudi plugin's compatibility matrix (docs.vllm.ai/projects/gaudi). The version formats:
``hl-smi`` prints the driver as ``<release>-<git hash>`` (``1.20.0-bd87f71``) and its version
line as ``hl-<release>-fw-<firmware>`` (docs.habana.ai, System Management Interface Tool);
the Gaudi torch carries the release in its local label (``2.9.0+hpu.1.23.0.695.git...``, as
pip normalises ``+hpu_1.23.0-695.git...``); the bridge distribution is ``<release>.<build>``
(``habana-torch-plugin 1.23.0.695``). The firmware's version names its release too:
``hl-smi -v`` prints ``hl-<release>-fw-<firmware>``, and the Firmware Upgrade guide's SPI
version reads ``hl-gaudi3-1.22.0-fw-61.3.2-sec-9``; it is flashed apart from the driver
(``hl-fw-loader``), so each is checked against the software's release.

Pure: no torch, no subprocess; the diagnostics pass the versions in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hpu_plugin.gaudi.findings import Finding


@dataclass(frozen=True)
class GaudiRelease:
    """One Intel Gaudi software release and what it ships."""

    version: str  # 1.23.0
    torch: str  # the torch release its PyTorch build is of
    generations: tuple[str, ...]  # torch.hpu.get_device_name() names it supports
    transformers: str  # the Transformers release its optimum-habana was tested with

    @property
    def key(self) -> tuple[int, ...]:
        return _numbers(self.version)


RELEASES: tuple[GaudiRelease, ...] = (
    GaudiRelease("1.19.0", "2.5.1", ("GAUDI", "GAUDI2", "GAUDI3"), "4.45.2"),
    GaudiRelease("1.21.0", "2.6.0", ("GAUDI", "GAUDI2", "GAUDI3"), "4.45.2"),
    GaudiRelease("1.22.0", "2.7.1", ("GAUDI2", "GAUDI3"), "4.49.0"),
    GaudiRelease("1.23.0", "2.9.0", ("GAUDI2", "GAUDI3"), "4.55.4"),
    GaudiRelease("1.24.0", "2.10.0", ("GAUDI2", "GAUDI3"), "4.55"),
    GaudiRelease("1.24.1", "2.11.0", ("GAUDI2", "GAUDI3"), "4.55"),
)

_RELEASE = re.compile(r"(\d+)\.(\d+)\.(\d+)", re.ASCII)
#: The release in a Gaudi torch's local label: ``+hpu.1.23.0.695...`` or ``+hpu_1.23.0-695``.
_TORCH_LABEL = re.compile(r"\+hpu[._-]?(\d+\.\d+\.\d+)", re.ASCII | re.IGNORECASE)


def _numbers(version: str) -> tuple[int, ...]:
    match = _RELEASE.match(version.strip())
    return tuple(int(part) for part in match.groups()) if match else ()


def software_release(version: str) -> str | None:
    """``1.23.0`` from a bridge version (``1.23.0.695``) or a driver (``1.23.0-695``,
    ``1.20.0-bd87f71``); ``None`` when the text names no release."""
    match = _RELEASE.match(version.strip())
    return ".".join(match.groups()) if match else None


def torch_release(version: str) -> tuple[str, str | None]:
    """(the torch release, the Gaudi release its local label names or ``None``)."""
    base = version.split("+", 1)[0].strip()
    label = _TORCH_LABEL.search(version)
    return base, label.group(1) if label else None


def find(version: str) -> GaudiRelease | None:
    """The table's row for a software release: the same major.minor.patch, or, for a patch
    release the table does not list (1.21.4), the newest listed one of its major.minor."""
    key = _numbers(version)
    if not key:
        return None
    same = [r for r in RELEASES if r.key == key]
    if same:
        return same[0]
    line = [r for r in RELEASES if r.key[:2] == key[:2] and r.key <= key]
    return line[-1] if line else None


def known_range() -> str:
    return f"{RELEASES[0].version} to {RELEASES[-1].version}"


def _same_torch(installed: str, shipped: str) -> bool:
    return _numbers(installed)[:2] == _numbers(shipped)[:2]


def check(
    bridge: str | None,
    torch_version: str | None,
    driver: str | None = None,
    generation: str | None = None,
    firmware: str | None = None,
) -> list[Finding]:
    """Findings for the real Gaudi software installed: bridge ``habana-torch-plugin``
    version, the installed torch, ``hl-smi``'s driver version, the device's generation, the
    firmware's version (``<release>-fw-<firmware>``).
    Each mismatch is named with the fix; a release the table does not know is said so."""
    if bridge is None:
        return []
    release_text = software_release(bridge)
    if release_text is None:
        return [Finding("gaudi-software", "warning",
                        f"cannot read the Gaudi software release from habana-torch-plugin "
                        f"{bridge!r}", "reinstall the Gaudi software")]
    release = find(release_text)
    findings: list[Finding] = []
    if release is None:
        findings.append(Finding(
            "gaudi-software", "info",
            f"Gaudi software {release_text} is not in the releases this hpu-plugin knows "
            f"({known_range()}); its torch, driver and generations are not checked",
        ))
    else:
        findings.append(Finding(
            "gaudi-software", "ok",
            f"Gaudi software {release_text} (ships torch {release.torch}; supports "
            f"{', '.join(release.generations)})",
        ))
    if torch_version is not None:
        findings += _check_torch(release_text, release, torch_version)
    if driver:
        findings += _check_driver(release_text, driver)
    if firmware:
        findings += _check_firmware(release_text, firmware)
    if release is not None and generation and generation.upper() not in release.generations:
        newest = [r.version for r in RELEASES if generation.upper() in r.generations]
        fix = (f"use Gaudi software {newest[-1]}, the last release for {generation}"
               if newest else "use a Gaudi software release that supports this device")
        findings.append(Finding(
            "gaudi-software", "error",
            f"Gaudi software {release_text} does not support {generation} (it supports "
            f"{', '.join(release.generations)})", fix,
        ))
    return findings


def _check_torch(release_text: str, release: GaudiRelease | None, torch_version: str
                 ) -> list[Finding]:
    base, labelled = torch_release(torch_version)
    reinstall = (
        f"reinstall the PyTorch of Gaudi software {release_text} (Intel's installer or "
        f"container for that release), and pin it so that pip does not replace it"
    )
    if labelled is None:
        return [Finding(
            "gaudi-software", "error",
            f"torch {torch_version} is not a Gaudi build (no '+hpu' in its version): a torch "
            f"from PyPI has replaced the one Gaudi software {release_text} installed, and the "
            "bridge cannot load with it",
            reinstall,
        )]
    if labelled != release_text:
        return [Finding(
            "gaudi-software", "error",
            f"torch {torch_version} is the build of Gaudi software {labelled}, but the bridge "
            f"(habana-torch-plugin) is of {release_text}",
            reinstall,
        )]
    if release is not None and not _same_torch(base, release.torch):
        return [Finding(
            "gaudi-software", "error",
            f"torch {base} is not the torch of Gaudi software {release_text} "
            f"({release.torch})",
            reinstall,
        )]
    return []


def _check_part(release_text: str, part: str, version: str, read_with: str,
                install: str) -> list[Finding]:
    """The driver or the firmware, whose version names its release, against the software's;
    ``install`` is how to put that release's ``part`` in place."""
    part_release = software_release(version.split("-fw-", 1)[0])
    if part_release is None:
        return [Finding("gaudi-software", "warning",
                        f"cannot read a release from the {part} version {version!r}",
                        f"check `{read_with}`")]
    if part_release != release_text:
        return [Finding(
            "gaudi-software", "warning",
            f"the {part} is {version}, the Gaudi software {release_text}: a release's driver, "
            "firmware and software are tested together only",
            f"{install}, or use the Gaudi software {part_release} that matches the {part}",
        )]
    return [Finding("gaudi-software", "ok", f"{part} {version} matches the Gaudi software")]


def _check_driver(release_text: str, driver: str) -> list[Finding]:
    return _check_part(release_text, "driver", driver, "hl-smi -Q driver_version -f csv",
                       f"install the driver and firmware of {release_text}")


def _check_firmware(release_text: str, firmware: str) -> list[Finding]:
    return _check_part(release_text, "firmware", firmware, "hl-smi -v",
                       f"flash the firmware of {release_text} (`sudo hl-fw-loader`, Intel's "
                       "Firmware Upgrade guide)")
