"""The ``shapes`` plugin decides buckets from the Gaudi facts and the user's settings; a
third party replaces them through ``hpu_shape_buckets``."""

from __future__ import annotations

import pytest

from hpu_plugin.gaudi.shape_buckets import bucket_for, default_buckets
from hpu_plugin.hookspecs import Refusal
from hpu_plugin.loader import ENTRY_POINT_GROUP
from hpu_plugin.plugins import bucket_sizes as shapes
from hpu_plugin.registry import Registry, discover
from hpu_plugin.switches import Selection


def test_default_buckets_ramp_then_step():
    assert default_buckets("length", 1024) == (64, 128, 256, 384, 512, 640, 768, 896, 1024)
    assert default_buckets("batch", None)[:7] == (1, 2, 4, 8, 16, 32, 64)
    assert default_buckets("cache", 4096) == (512, 1024, 2048, 4096)
    assert default_buckets("length", 100) == (64, 100)  # capped at the model's positions


def test_bucket_for_pads_up_and_leaves_larger_sizes():
    assert [bucket_for(n, (64, 128)) for n in (1, 64, 65, 128, 129)] == [64, 64, 128, 128, 129]
    assert bucket_for(7, ()) == 7


@pytest.mark.parametrize("environ, kind, expected", [
    ({}, "length", default_buckets("length", 2048)),
    ({"HPU_PLUGIN_BUCKETS": "0"}, "length", ()),
    ({"HPU_PLUGIN_BUCKETS": "off"}, "batch", ()),
    ({"HPU_PLUGIN_BUCKETS": "1", "HPU_PLUGIN_BUCKETS_LENGTH": "100, 200"}, "length", (100, 200)),
    ({"HPU_PLUGIN_BUCKETS_BATCH": "0"}, "batch", ()),
    ({"HPU_PLUGIN_BUCKETS_BATCH": "0"}, "length", default_buckets("length", 2048)),
])
def test_settings(environ, kind, expected):
    assert shapes.buckets(kind, 2048, environ) == expected


@pytest.mark.parametrize("environ, named", [
    ({"HPU_PLUGIN_BUCKETS": "maybe"}, "HPU_PLUGIN_BUCKETS"),
    ({"HPU_PLUGIN_BUCKETS_LENGTH": "256,128"}, "HPU_PLUGIN_BUCKETS_LENGTH"),
    ({"HPU_PLUGIN_BUCKETS_CACHE": "1k"}, "HPU_PLUGIN_BUCKETS_CACHE"),
    ({"HPU_PLUGIN_BUCKETS_BATCH": "-1,4"}, "HPU_PLUGIN_BUCKETS_BATCH"),
])
def test_a_bad_setting_is_refused_naming_it_and_the_fix(environ, named):
    kind = named.rsplit("_", 1)[-1].lower() if named != "HPU_PLUGIN_BUCKETS" else "length"
    with pytest.raises(Refusal, match=named) as info:
        shapes.buckets(kind, 2048, environ)
    assert "=0" in str(info.value)


def test_other_kinds_get_no_opinion():
    assert shapes.hpu_shape_buckets("width", 2048) is None


def test_third_party_tryfirst_replaces_the_buckets_and_none_defers(tmp_path, monkeypatch):
    # a real distribution with a real entry point, found by importlib.metadata
    (tmp_path / "tp_fixed_buckets.py").write_text(
        "from hpu_plugin.hookspecs import hookimpl\n\n"
        "@hookimpl(tryfirst=True)\n"
        "def hpu_shape_buckets(kind, limit):\n"
        "    return (100, 1000) if kind == 'length' else None\n"
    )
    info = tmp_path / "tp_fixed_buckets-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tp-fixed-buckets\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nfixed = tp_fixed_buckets\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("HPU_PLUGIN_BUCKETS", raising=False)
    registry = Registry(Selection())
    registry.load_entry_points(discover() + discover(path=[str(tmp_path)]))
    assert registry.shape_buckets("length", 2048) == (100, 1000)
    assert registry.shape_buckets("cache", 2048) == default_buckets("cache", 2048)
    assert registry.call_order("hpu_shape_buckets")[-1] == "shapes"
