"""Plugin names that collide or cannot be written: the fix ``hpu-plugin doctor`` prints is
a value the parser accepts, and it turns off that plugin only."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from hpu_plugin.loader import PluginRecord
from hpu_plugin.registry import Registry
from hpu_plugin.switches import Selection, disable_value, names

from .conftest import NAMES_DIST, environ, run


def _registry(site, **environ_values: str) -> Registry:
    registry = Registry(Selection.from_environ(environ_values))
    registry.load_entry_points(site.entry_points())
    return registry


def test_a_colliding_name_is_turned_off_without_the_first_party_one(site):
    site.add("device", "from hpu_plugin.hookspecs import hookimpl\n", dist="other-dist")
    before = _registry(site)
    clash = before.records["device [other-dist]"]
    assert clash.status == "failed" and before.records["device"].first_party
    fix = disable_value(clash)
    assert fix == "other-dist:device"
    after = _registry(site, HPU_PLUGIN_DISABLE=fix)
    assert after.records["device"].status == "enabled" and after.records["device"].first_party
    assert after.records["device [other-dist]"].status == "disabled"


def test_an_unwritable_name_is_refused_and_offers_no_unparsable_fix(site):
    site.add("bad;name", "from hpu_plugin.hookspecs import hookimpl\n", dist="semi-dist")
    registry = _registry(site)
    record = registry.records["bad;name"]
    assert record.status == "failed" and "cannot be named" in record.reason
    assert disable_value(record) == ""  # it never loads: nothing to turn off
    assert all(r.status == "enabled" for r in registry.records.values() if r.first_party)


@given(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True),
       st.from_regex(r"[\w.+-]{1,20}", fullmatch=True))
def test_every_fix_parses_and_names_its_plugin(dist, name):
    record = PluginRecord(name=name, value="m", distribution=dist, version="1",
                          first_party=False)
    fix = disable_value(record)
    selection = Selection(disabled=names({"HPU_PLUGIN_DISABLE": fix}, "HPU_PLUGIN_DISABLE"))
    assert selection.refuses(record) is not None
    first = PluginRecord(name=name, value="hpu_plugin.x", distribution="hpu-plugin",
                         version="1", first_party=True)
    assert selection.refuses(first) is None  # never the first-party plugin of that name


def test_doctor_prints_fixes_that_work(fault_plugins):
    """With the colliding and the unwritable plugin installed, every fix doctor prints is
    accepted, and applied together they keep the first-party plugins enabled."""
    done = run("from hpu_plugin.cli import main; import sys; sys.exit(main(['doctor', '--json"
               "']))", environ(HPU_PLUGIN_EMULATE="1"))
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    findings = json.loads(done.stdout)["findings"]
    fixes = [f["fix"].rsplit("HPU_PLUGIN_DISABLE=", 1)[-1] for f in findings
             if f["check"] == "plugins" and NAMES_DIST in f["message"]]
    assert sorted(fixes) == [f"fix or uninstall {NAMES_DIST}", f"{NAMES_DIST}:device",
                             f"{NAMES_DIST}:same_module"]  # a second name of no_hooks_a
    fixes = [fix for fix in fixes if fix.startswith(NAMES_DIST)]
    listed = run("from hpu_plugin.cli import main; import sys; sys.exit(main(['plugins', "
                 "'--json']))",
                 environ(HPU_PLUGIN_EMULATE="1", HPU_PLUGIN_DISABLE=",".join(fixes)))
    assert listed.returncode == 0, listed.stderr[-2000:]
    plugins = {(p["name"], p["first_party"]): p["status"]
               for p in json.loads(listed.stdout)["plugins"]}
    assert plugins[("device", True)] == "enabled"
    assert plugins[("device", False)] == "disabled" and plugins[("bad;name", False)] == "failed"
