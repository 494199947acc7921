"""Ships ``hpu_emulator.pth`` at the root of the wheel, in regular and editable installs
alike, through hatchling's documented build data (``force_include`` and
``force_include_editable``): see ``hpu_emulator/early.py`` for why the emulator needs a line
at interpreter start."""

from __future__ import annotations

from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class StartupLine(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        key = "force_include_editable" if version == "editable" else "force_include"
        build_data.setdefault(key, {})["hpu_emulator.pth"] = "hpu_emulator.pth"
