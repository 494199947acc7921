"""Properties that must hold for any names and any discovery order."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpu_plugin.loader import DIST_NAME
from hpu_plugin.registry import Registry, discover
from hpu_plugin.switches import Selection

NAMES = st.from_regex(r"[A-Za-z][A-Za-z0-9_.+-]{0,12}", fullmatch=True).filter(
    lambda name: name.lower() not in {"true", "yes", "on", "no", "off", "false"}
)


@given(names=st.lists(NAMES, min_size=1, max_size=6, unique=True),
       padding=st.sampled_from(["", " ", "  ", "\t"]))
def test_disable_and_only_read_back_exactly_the_names(names, padding):
    raw = ",".join(f"{padding}{name}{padding}" for name in names)
    selection = Selection.from_environ({"HPU_PLUGIN_DISABLE": raw, "HPU_PLUGIN_ONLY": raw})
    assert selection.disabled == frozenset(names)
    assert selection.only == frozenset(names)


@pytest.fixture(scope="module")
def shared_plugin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One real module with a plugin class: each entry point naming it gets an instance of
    its own (one module under several names would be loaded once)."""
    root: Path = tmp_path_factory.mktemp("shared")
    module = "tp_shared_plain"
    (root / f"{module}.py").write_text(textwrap.dedent("""
        from hpu_plugin.hookspecs import hookimpl

        class Plugin:
            @hookimpl
            def hpu_ddp_backend(self, requested):
                return None
    """))
    sys.path.insert(0, str(root))
    yield module
    sys.path.remove(str(root))
    sys.modules.pop(module, None)


FIRST_PARTY = [ep for ep in discover() if ep.dist is not None and ep.dist.name == DIST_NAME]


@settings(max_examples=40, deadline=None)
@given(names=st.lists(NAMES, min_size=1, max_size=5, unique=True), data=st.data())
def test_call_order_is_first_party_then_names_ascending_whatever_the_discovery_order(
    shared_plugin, names, data
):
    third = [metadata.EntryPoint(name, f"{shared_plugin}:Plugin", "hpu_plugin") for name in names
             if name not in {"device", "compile", "ddp", "quantization", "shapes", "fast_paths",
                                  "gpu_migration"}]
    found = data.draw(st.permutations([*FIRST_PARTY, *third]))
    registry = Registry(Selection())
    registry.load_entry_points(found)
    assert registry.call_order("hpu_ddp_backend") == [
        "gpu_migration", "ddp", *sorted(ep.name for ep in third)]
