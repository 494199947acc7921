"""Who is asked first: first-party plugins win ties; third parties take precedence only
when they ask for it (tryfirst, wrappers) and are fallbacks with trylast."""

from __future__ import annotations

import sys
import types

import pytest

from hpu_plugin.gaudi import migration
from hpu_plugin.hookspecs import Refusal
from hpu_plugin.registry import Registry
from hpu_plugin.switches import Selection

GLOO_PLAIN = """
from hpu_plugin.hookspecs import hookimpl

@hookimpl
def hpu_ddp_backend(requested):
    return "gloo"
"""


def _registry(eps, disabled: frozenset[str] = frozenset()) -> Registry:
    registry = Registry(Selection(disabled=disabled))
    registry.load_entry_points(eps)
    return registry


def test_first_party_wins_a_tie_whatever_the_entry_point_order(site):
    site.add("plain", GLOO_PLAIN)
    eps = site.entry_points()
    for order in (eps, list(reversed(eps))):
        registry = _registry(order)
        assert registry.ddp_backend(None) == "hccl"
        assert registry.call_order("hpu_ddp_backend") == ["gpu_migration", "ddp", "plain"]


def test_third_party_with_tryfirst_takes_precedence(site):
    site.add("first", GLOO_PLAIN.replace("@hookimpl", "@hookimpl(tryfirst=True)"))
    registry = _registry(site.entry_points())
    assert registry.ddp_backend(None) == "gloo"
    assert registry.call_order_detail("hpu_ddp_backend") == [
        ("first", "tryfirst"), ("gpu_migration", "tryfirst"), ("ddp", "plain")
    ]


def test_third_party_tryfirst_decides_before_the_migration_toolkit(site, monkeypatch):
    """The policy docs/gpu-migration.md tells users to write: refuse CUDA-written jobs.
    The toolkit counts as loaded once its module is imported, as the bridge imports it."""
    site.add("policy", """
    from hpu_plugin.hookspecs import Refusal, hookimpl

    @hookimpl(tryfirst=True)
    def hpu_ddp_backend(requested):
        if requested == "nccl":
            raise Refusal("this cluster runs no CUDA-written jobs")
    """)
    monkeypatch.setitem(sys.modules, migration.MODULE, types.ModuleType(migration.MODULE))
    registry = _registry(site.entry_points())
    with pytest.raises(Refusal, match="no CUDA-written jobs"):
        registry.ddp_backend("nccl")
    assert registry.ddp_backend("hccl") == "hccl"
    without = _registry(site.entry_points(), disabled=frozenset({"policy"}))
    assert without.ddp_backend("nccl") == "hccl"  # the toolkit's mapping, as before


def test_trylast_is_a_fallback_asked_only_when_everyone_else_defers(site):
    site.add("fallback", GLOO_PLAIN.replace("@hookimpl", "@hookimpl(trylast=True)"))
    registry = _registry(site.entry_points())
    assert registry.ddp_backend(None) == "hccl"  # first-party decides
    # without the ddp plugin nobody else decides (gpu_migration answers only for nccl)
    registry = _registry(site.entry_points(), disabled=frozenset({"ddp"}))
    assert registry.ddp_backend(None) == "gloo"


def test_third_parties_among_equals_are_asked_in_name_order(site):
    source = """
    from hpu_plugin.hookspecs import hookimpl

    @hookimpl
    def hpu_ddp_backend(requested):
        return {answer!r}
    """
    site.add("beta", source.format(answer="beta-backend"))
    site.add("alpha", source.format(answer="alpha-backend"))
    for order in (site.entry_points(), list(reversed(site.entry_points()))):
        registry = _registry(order)
        assert registry.call_order("hpu_ddp_backend") == ["gpu_migration", "ddp", "alpha", "beta"]
        registry = _registry(order, disabled=frozenset({"ddp"}))  # it would answer first
        assert registry.ddp_backend(None) == "alpha-backend"


def test_new_style_wrapper_sees_and_replaces_the_result(site):
    site.add("wrap", """
    from hpu_plugin.hookspecs import hookimpl

    seen = []

    @hookimpl(wrapper=True)
    def hpu_ddp_backend(requested):
        result = yield
        seen.append(result)
        return "gloo" if result == "hccl" else result
    """)
    registry = _registry(site.entry_points())
    assert registry.call_order_detail("hpu_ddp_backend")[0] == ("wrap", "wrapper")
    assert registry.ddp_backend(None) == "gloo"
    module = __import__(site.modules[-1])
    assert module.seen == ["hccl"]


def test_old_style_hookwrapper_is_refused_naming_the_new_form(site, caplog):
    site.add("oldwrap", """
    from hpu_plugin.hookspecs import hookimpl

    @hookimpl(hookwrapper=True)
    def hpu_compile_backend(requested):
        outcome = yield
        outcome.force_result("eager")
    """)
    registry = _registry(site.entry_points())
    record = registry.records["oldwrap"]
    assert record.status == "failed" and "@hookimpl(wrapper=True)" in record.reason
    assert "oldwrap" not in registry.call_order("hpu_compile_backend")
    assert registry.compile_backend(None) == "hpu_backend"
    assert any("oldwrap" in r.getMessage() and "wrapper=True" in r.getMessage()
               for r in caplog.records)


def test_wrapper_sees_a_refusal_from_the_implementations(site):
    site.add("catcher", """
    from hpu_plugin.hookspecs import Refusal, hookimpl

    @hookimpl(wrapper=True)
    def hpu_ddp_backend(requested):
        try:
            return (yield)
        except Refusal:
            return "hccl"
    """)
    site.add("observer", """
    from hpu_plugin.hookspecs import hookimpl

    seen = []

    @hookimpl(wrapper=True)
    def hpu_ddp_backend(requested):
        try:
            return (yield)
        except Exception as exc:
            seen.append(type(exc).__name__)
            raise
    """)
    registry = _registry(site.entry_points())
    assert registry.ddp_backend("nccl") == "hccl"
    observer = __import__(site.modules[-1])
    assert observer.seen == ["Refusal"]


def test_refusal_without_a_wrapper_reaches_the_caller(site):
    site.add("refuser", """
    from hpu_plugin.hookspecs import Refusal, hookimpl

    @hookimpl(tryfirst=True)
    def hpu_quantization_device_map(method, bits, device_map):
        raise Refusal("bits=3 cannot run: use 4 or 8")
    """)
    registry = _registry(site.entry_points())
    with pytest.raises(Refusal, match="bits=3"):
        registry.quantization_device_map("bitsandbytes", 3, None)
    assert registry.records["refuser"].faults == []


@pytest.mark.parametrize("shape", ["class-static", "class-instance-methods", "instance"])
def test_plugins_may_be_classes_or_instances(site, shape):
    sources = {
        "class-static": ("""
        from hpu_plugin.hookspecs import hookimpl

        class Plugin:
            @staticmethod
            @hookimpl(tryfirst=True)
            def hpu_ddp_backend(requested):
                return "gloo"
        """, "Plugin"),
        "class-instance-methods": ("""
        from hpu_plugin.hookspecs import hookimpl

        class Plugin:
            def __init__(self):
                self.answer = "gloo"

            @hookimpl(tryfirst=True)
            def hpu_ddp_backend(self, requested):
                return self.answer
        """, "Plugin"),
        "instance": ("""
        from hpu_plugin.hookspecs import hookimpl

        class Plugin:
            @hookimpl(tryfirst=True)
            def hpu_ddp_backend(self, requested):
                return "gloo" if requested is None else None

        plugin = Plugin()
        """, "plugin"),
    }
    source, attr = sources[shape]
    site.add("shaped", source, attr=attr)
    registry = _registry(site.entry_points())
    assert registry.records["shaped"].status == "enabled", registry.records["shaped"].reason
    assert registry.records["shaped"].hooks == ["hpu_ddp_backend"]
    assert registry.ddp_backend(None) == "gloo"


def test_a_third_party_reusing_a_first_party_name_is_refused(site):
    site.add("ddp", GLOO_PLAIN.replace("@hookimpl", "@hookimpl(tryfirst=True)"),
             dist="impostor")
    for order in (site.entry_points(), list(reversed(site.entry_points()))):
        registry = _registry(order)
        assert registry.records["ddp"].distribution == "hpu-plugin"
        impostor = registry.records["ddp [impostor]"]
        assert impostor.status == "failed" and "duplicate" in impostor.reason
        assert registry.ddp_backend(None) == "hccl"


def test_first_party_is_decided_by_distribution_not_module_name(site):
    # A third party whose entry point names a module under hpu_plugin. stays a third party.
    site.add("sneaky", GLOO_PLAIN, dist="not-hpu-plugin", value="hpu_plugin.plugins.ddp")
    registry = _registry(site.entry_points())
    assert registry.records["sneaky"].first_party is False
    assert registry.records["ddp"].first_party is True
    # the same module under two names: loaded once, under the first-party name
    assert registry.call_order("hpu_ddp_backend") == ["gpu_migration", "ddp"]
    assert "the same plugin as 'ddp'" in registry.records["sneaky"].reason


def test_refusal_passes_through_a_wrapper_that_does_not_handle_it(site):
    site.add("bystander", """
    from hpu_plugin.hookspecs import hookimpl

    events = []

    @hookimpl(wrapper=True)
    def hpu_ddp_backend(requested):
        try:
            return (yield)
        finally:
            events.append("left")
    """)
    registry = _registry(site.entry_points())
    with pytest.raises(Refusal, match="nccl"):
        registry.ddp_backend("nccl")
    assert __import__(site.modules[-1]).events == ["left"]
    assert registry.records["bystander"].faults == []


def test_specname_lets_a_function_of_another_name_implement_a_hook(site):
    site.add("renamed", """
    from hpu_plugin.hookspecs import hookimpl

    @hookimpl(specname="hpu_ddp_backend", tryfirst=True)
    def choose_backend(requested):
        return 42  # checked against hpu_ddp_backend's declared type, so refused
    """)
    registry = _registry(site.entry_points())
    assert registry.records["renamed"].hooks == ["hpu_ddp_backend"]
    assert registry.call_order("hpu_ddp_backend") == ["renamed", "gpu_migration", "ddp"]
    assert registry.ddp_backend(None) == "hccl"
    assert "does not allow" in registry.records["renamed"].reason


def test_backend_names_reach_the_plugins_as_torch_reads_them(site):
    # torch reads a backend name in any case (Backend("NCCL") is "nccl"): an upper-case
    # "NCCL" is refused with the fix as "nccl" is, and "HCCL" gets HCCL's checks
    registry = _registry(site.entry_points())
    for name in ("nccl", "NCCL", "Nccl"):
        with pytest.raises(Refusal, match=r"'nccl' is for NVIDIA GPUs.*ddp_backend='hccl'"):
            registry.ddp_backend(name)
    assert registry.ddp_backend("HCCL") == "hccl"
    assert registry.ddp_backend("GLOO") == "gloo"
    assert registry.ddp_backend(None) == "hccl"
