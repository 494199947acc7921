"""Hostile environment values: every parser of ``hpu_plugin.settings`` either returns a
value in its accepted range or raises a ``SettingError`` naming the variable and the
accepted form; never another exception, never a silent default."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpu_emulator import config
from hpu_emulator.errors import EmulationError
from hpu_plugin import settings
from hpu_plugin.errors import SettingError
from hpu_plugin.switches import Selection

VAR = "HPU_TEST_VARIABLE"
texts = st.text(max_size=60) | st.from_regex(r"\s*[0-9]{0,40}(\.[0-9]{0,5})?\s*[A-Za-z]{0,4}\s*",
                                              fullmatch=True)


def _named(call) -> object:
    """``call()``; a refusal must name the variable and say what is accepted."""
    try:
        return call()
    except settings.SettingError as exc:
        assert VAR in str(exc) and "accepted:" in str(exc) and exc.fix
        return exc


@given(texts)
def test_switch_is_on_off_or_named_refusal(raw):
    value = _named(lambda: settings.switch(VAR, raw))
    word = raw.strip().lower()
    if word in settings.ON_WORDS:
        assert value is True
    elif word in settings.OFF_WORDS:
        assert value is False
    else:
        assert isinstance(value, settings.SettingError)


@given(texts, st.integers(-5, 5), st.integers(5, 10**6))
def test_integer_is_in_range_or_named_refusal(raw, low, high):
    value = _named(lambda: settings.integer(VAR, raw, low, high))
    if not isinstance(value, settings.SettingError):
        assert isinstance(value, int) and low <= value <= high
        assert raw.strip().lstrip("+-").isascii()


@given(st.integers(0, 10**12))
def test_rank_round_trips(number):
    assert settings.rank(VAR, f" {number} ") == number


@given(texts)
def test_rank_is_ascii_digits_or_named_refusal(raw):
    value = _named(lambda: settings.rank(VAR, raw))
    if not isinstance(value, settings.SettingError):
        assert raw.strip().isascii() and raw.strip().isdigit() and value >= 0


@given(texts)
def test_seconds_are_positive_and_finite_or_named_refusal(raw):
    value = _named(lambda: settings.seconds(VAR, raw, 2.0))
    if not isinstance(value, settings.SettingError):
        assert isinstance(value, float) and 0 < value <= 7 * 24 * 3600


@given(texts | st.lists(st.integers(-3, 10**6)).map(lambda xs: ",".join(map(str, xs))))
def test_ascending_is_strictly_ascending_positive_or_named_refusal(raw):
    value = _named(lambda: settings.ascending(VAR, raw))
    if not isinstance(value, settings.SettingError):
        assert value and value[0] > 0 and list(value) == sorted(set(value))


@pytest.mark.parametrize("raw", ["\u0663", "1_0", "0x8", "1e2", "8,\uff13", "128,128", "0,8",
                                 ",", "9" * 40])
def test_hostile_bucket_sizes_are_refused_naming_the_variable(raw):
    from hpu_plugin.hookspecs import Refusal
    from hpu_plugin.plugins import bucket_sizes as shapes

    with pytest.raises(Refusal, match=r"HPU_PLUGIN_BUCKETS_LENGTH=.*accepted: strictly"):
        shapes.buckets("length", 2048, {"HPU_PLUGIN_BUCKETS_LENGTH": raw})


@pytest.mark.parametrize("raw, on", [(None, False), ("", False), ("1", True), ("Y", True),
                                     (" t ", True), ("on", True), ("0", False), ("maybe", False)])
def test_gaudi_flags_are_read_as_the_bridge_reads_them(raw, on):
    assert settings.gaudi_flag(raw) is on


def test_no_number_is_parsed_from_the_environment_outside_settings():
    """``int()``/``float()`` straight on an environment value takes what no shell means
    (``\u0663``, ``1_0``, ``1e3``) and fails with a bare ValueError: every setting goes through
    :mod:`hpu_plugin.settings` instead."""
    import ast
    from pathlib import Path

    import hpu_plugin

    root = Path(hpu_plugin.__file__).parent
    found = []
    for path in root.rglob("*.py"):
        if path.name == "settings.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in {"int", "float"} and node.args
                    and "environ" in ast.unparse(node.args[0])):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    assert found == [], found


@given(texts)
def test_size_is_whole_bytes_in_range_or_named_refusal(raw):
    value = _named(lambda: config.memory_size(VAR, raw))
    if not isinstance(value, settings.SettingError):
        assert isinstance(value, int) and config.MIN_MEMORY <= value <= config.MAX_MEMORY


@given(st.integers(2, 1024), st.sampled_from(["MiB", "GiB", "TiB", "MB", "GB"]))
def test_size_round_trips(number, unit):
    assert config.memory_size(VAR, f"{number}{unit}") == number * config.MEMORY_UNITS[unit.lower()]


@given(st.text(max_size=40))
def test_emulator_memory_never_escapes_as_another_error(raw):
    try:
        assert config.parse_memory(raw) >= config.MIN_MEMORY
    except EmulationError as exc:
        assert "HPU_PLUGIN_EMULATE_MEMORY" in str(exc)


@given(st.text(max_size=40), st.text(max_size=40), st.text(max_size=10))
def test_plugin_switches_never_escape_as_another_error(disable, only, budget):
    environ = {"HPU_PLUGIN_DISABLE": disable, "HPU_PLUGIN_ONLY": only,
               "HPU_PLUGIN_IMPORT_BUDGET": budget}
    try:
        Selection.from_environ(environ)
    except SettingError as exc:
        assert any(name in str(exc) for name in environ)


@pytest.mark.parametrize("raw", [
    "0.5", "0", "1", "1023KiB", "0.0000001GiB", "99999999999TiB", "9" * 400, "1e9", "-1GiB",
    "nan", "inf", "1_000_000_000", "0x40000000", "\u0663GiB", "\uff13GiB", "96 GiB GiB", "96GiBs",
    "2PiB", "1.5", "",
])
def test_hostile_memory_sizes_are_refused_naming_the_variable(raw):
    with pytest.raises(EmulationError, match=r"HPU_PLUGIN_EMULATE_MEMORY=.*accepted: a whole"):
        config.parse_memory(raw)


@pytest.mark.parametrize("raw", ["abc", "\u0663", "\uff13", "-1", "1.5", "1e3", "0x1", " ", "1 2",
                                 "9" * 400])
def test_hostile_ranks_are_refused_naming_the_variable(raw):
    with pytest.raises(EmulationError, match="LOCAL_RANK="):
        config.check_launcher_variables({"LOCAL_RANK": raw + ("x" if not raw.strip() else "")})


@pytest.mark.parametrize("raw", ["abc", "\u0663", "0", "-1", "nan", "inf", "1e3", "9" * 400,
                                 "1,5", "99999999"])
def test_hostile_import_budgets_are_refused_naming_the_variable(raw):
    with pytest.raises(SettingError, match="HPU_PLUGIN_IMPORT_BUDGET="):
        Selection.from_environ({"HPU_PLUGIN_IMPORT_BUDGET": raw})


@pytest.mark.parametrize("raw", ["maybe", "2", "enabled", "ja", "\u0661"])
def test_hostile_switch_words_are_refused_naming_the_variable(raw):
    with pytest.raises(SettingError, match="HPU_PLUGIN_NO_THIRD_PARTY="):
        Selection.from_environ({"HPU_PLUGIN_NO_THIRD_PARTY": raw})


@pytest.mark.parametrize("raw", ["\u0663", "\uff13", "1e1", "0x8", "+8", "08x"])
def test_non_ascii_or_odd_device_counts_are_refused(raw):
    with pytest.raises(EmulationError, match="HPU_PLUGIN_EMULATE_DEVICES="):
        config.server({"HPU_PLUGIN_EMULATE": "1", "HPU_PLUGIN_EMULATE_DEVICES": raw})


def test_the_word_sets_have_one_home():
    """The registry, activation, the emulator's configuration and the plugins read the switch
    words from settings: no other copy of them is left in the package. (A set
    that models another program's parser, such as the Gaudi bridge's, is not a copy.)"""
    import ast
    from pathlib import Path

    import hpu_plugin

    ours = {settings.ON_WORDS, settings.OFF_WORDS - {""}}
    root = Path(hpu_plugin.__file__).parent
    copies = []
    for path in root.rglob("*.py"):
        if path.name == "settings.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Set, ast.Tuple, ast.List)) and node.elts and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
            ):
                words = frozenset(e.value.lower() for e in node.elts) - {""}  # type: ignore[attr-defined]
                if words in ours:
                    copies.append(f"{path.relative_to(root)}:{node.lineno}")
    assert copies == [], copies


HUGE = "a;" * 50_000  # 100 kB: a pasted file, a runaway script
HUGE_VALUES = {
    "disable": lambda: Selection.from_environ({"HPU_PLUGIN_DISABLE": HUGE}),
    "only": lambda: Selection.from_environ({"HPU_PLUGIN_ONLY": HUGE}),
    "budget": lambda: Selection.from_environ({"HPU_PLUGIN_IMPORT_BUDGET": HUGE}),
    "third party": lambda: Selection.from_environ({"HPU_PLUGIN_NO_THIRD_PARTY": HUGE}),
    "size": lambda: config.memory_size(VAR, HUGE),
    "seconds": lambda: settings.seconds(VAR, HUGE, 1.0, 10.0),
}


@pytest.mark.parametrize("case", sorted(HUGE_VALUES))
def test_a_huge_value_is_cut_in_the_message(case):
    with pytest.raises(ValueError) as caught:
        HUGE_VALUES[case]()
    message = str(caught.value)
    assert len(message) < 1000 and "(100000 characters)" in message, message[:2000]
    assert "HPU_" in message and ("accepted" in message or "list" in message)
