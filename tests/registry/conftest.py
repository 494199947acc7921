"""Real plugin distributions written to a temporary directory, for in-process tests.

Each test plugin is a real module with a real ``*.dist-info`` (``METADATA`` and
``entry_points.txt``) on ``sys.path``, so ``importlib.metadata`` finds it, with its
distribution and version, exactly as it finds an installed one. The first-party entry
points come from the installed ``hpu-plugin`` metadata.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
from distributions import write_plugin

from hpu_plugin.loader import DIST_NAME
from hpu_plugin.registry import discover


class PluginSite:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules: list[str] = []
        self.tag = uuid.uuid4().hex[:8]

    def add(self, name: str, source: str, *, dist: str | None = None, version: str = "1.0",
            attr: str | None = None, value: str | None = None) -> str:
        """Write module and dist-info for one plugin; return the module name."""
        module = f"tp_{self.tag}_{name.replace('-', '_').replace('.', '_')}"
        value = value or module + (f":{attr}" if attr else "")
        write_plugin(
            self.root, module, source, dist=dist or f"tp-{name}", version=version, name=name,
            value=value,
        )
        self.modules.append(module)
        return module

    def entry_points(self, *, first_party: bool = True) -> list[metadata.EntryPoint]:
        """This site's entry points, plus the installed first-party ones."""
        found = []
        if first_party:
            found += [ep for ep in discover() if ep.dist is not None and ep.dist.name == DIST_NAME]
        return found + discover(path=[str(self.root)])


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginSite]:
    monkeypatch.syspath_prepend(str(tmp_path))
    plugin_site = PluginSite(tmp_path)
    yield plugin_site
    for module in plugin_site.modules:
        sys.modules.pop(module, None)


@pytest.fixture(autouse=True)
def _eager_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    # The first-party compile plugin refuses in lazy mode, Gaudi's own default.
    monkeypatch.setenv("PT_HPU_LAZY_MODE", "0")
