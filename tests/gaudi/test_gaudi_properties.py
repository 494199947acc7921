"""Every parser of environment variables and hl-smi output gives a value or its documented
error, for any input; never another exception."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hpu_plugin.gaudi import environment, hlsmi, modes, selection, visibility
from hpu_plugin.gaudi.config_error import GaudiConfigError
from hpu_plugin.gaudi.hlsmi import HlSmiError

# Text biased towards what these variables hold, plus anything at all.
id_chars = st.sampled_from([*list("0123456789, -;:\t\n"), "٣", "all", "ALL", "x"])
id_like = st.lists(id_chars, max_size=40).map("".join)
any_text = st.text(max_size=60)
env_value = st.one_of(st.none(), id_like, any_text)


@given(env_value)
def test_visible_modules(raw):
    try:
        value = visibility.parse_visible_modules(raw)
    except visibility.VisibilityError as exc:
        assert str(exc).startswith("HABANA_VISIBLE_MODULES")
        return
    assert value is None or (
        len(value) <= 8 and len(set(value)) == len(value) and all(v >= 0 for v in value)
    )
    if value is not None:  # round trip: what we print back parses to the same
        assert visibility.parse_visible_modules(",".join(map(str, value))) == value


@given(env_value)
def test_visible_devices(raw):
    try:
        value = visibility.parse_visible_devices(raw)
    except visibility.VisibilityError as exc:
        assert str(exc).startswith("HABANA_VISIBLE_DEVICES")
        return
    assert value is None or all(isinstance(v, int) and v >= 0 for v in value)


@given(env_value)
def test_module_id(raw):
    try:
        value = visibility.parse_module_id(raw)
    except visibility.VisibilityError as exc:
        assert str(exc).startswith("HLS_MODULE_ID")
        return
    assert value is None or value >= 0


@given(env_value)
def test_lazy_mode(raw):
    try:
        lazy = environment.parse_lazy_mode(raw)
    except environment.EnvironmentValueError as exc:
        assert str(exc).startswith("PT_HPU_LAZY_MODE")
        return
    assert lazy == environment.is_lazy({} if raw is None else {"PT_HPU_LAZY_MODE": raw})


@given(env_value)
def test_int64_support(raw):
    try:
        value = environment.parse_int64_support(raw)
    except environment.EnvironmentValueError as exc:
        assert str(exc).startswith("PT_ENABLE_INT64_SUPPORT")
        return
    assert value in (True, False, None)


@pytest.mark.parametrize("raw, value", [
    ("1", True), ("TRUE", True), ("0", False), ("false", False), ("", None), (None, None)])
def test_int64_support_takes_the_bridges_words(raw, value):
    assert environment.parse_int64_support(raw) is value


@pytest.mark.parametrize("raw", ["yes", "on", "no", "off", " 1", "2"])
def test_int64_support_refuses_what_the_bridge_stops_on(raw):
    """synapse_helpers/env_flags.cpp ``parse_env_bool``: 1/true/0/false in any case, nothing
    stripped, a fatal error for anything else."""
    with pytest.raises(environment.EnvironmentValueError, match="accepts only 1, true, 0 or"):
        environment.parse_int64_support(raw)


env_names = st.sampled_from(
    [
        "HABANA_VISIBLE_MODULES",
        "HABANA_VISIBLE_DEVICES",
        "HLS_MODULE_ID",
        "PT_HPU_LAZY_MODE",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "OMPI_COMM_WORLD_SIZE",
    ]
)
environs = st.dictionaries(env_names, st.one_of(id_like, any_text, st.integers(-3, 12).map(str)))
hosts = st.one_of(
    st.none(),
    st.just({i: i for i in range(8)}),
    st.lists(st.integers(0, 9), unique=True, max_size=8),
    st.dictionaries(st.integers(0, 7), st.integers(0, 9), max_size=8),
)


@settings(max_examples=300)
@given(environs, hosts)
def test_job_checks(environ, host):
    try:
        placement = selection.check_job_from_environ(environ, host)
        modes.mode(environ)
    except GaudiConfigError as exc:
        assert exc.variable and exc.fix and "Fix:" in str(exc)
        return
    if placement is not None and placement.per_process:
        # one module per process (Ray, Kubernetes): the one listed, whatever the local rank
        assert placement.modules == (placement.module_id,)
        listed = selection.visibility.parse_visible_modules(environ["HABANA_VISIBLE_MODULES"])
        assert listed == (placement.module_id,)
    elif placement is not None and placement.distributed:
        # hccl keeps a module id that is set; otherwise the local rank's entry
        own = selection.visibility.parse_module_id(environ.get("HLS_MODULE_ID"))
        expected = placement.modules[placement.local_rank] if own is None else own
        assert placement.module_id == expected
        if placement.enforced and len(placement.modules) > 1:
            assert selection.is_supported_group(placement.modules)


@settings(max_examples=300)
@given(environs, st.integers(-2, 10), st.integers(-2, 10), st.integers(-2, 10), hosts)
def test_distributed_job_any_numbers(environ, world, local_world, rank, host):
    try:
        placement = selection.check_distributed_job(environ, world, local_world, rank, host)
    except GaudiConfigError:
        return
    assert placement.world_size == world and placement.local_rank == rank


csv_cells = st.one_of(
    st.integers(0, 12).map(str),
    st.sampled_from(["index", "module_id", "name", "", "N/A", "x"]),
    st.text(alphabet=st.characters(blacklist_characters=",\r\n"), max_size=6),
)
csv_lines = st.lists(st.lists(csv_cells, min_size=1, max_size=4).map(", ".join), max_size=6)
hlsmi_text = st.one_of(
    csv_lines.map("\n".join),
    st.text(max_size=80),
    st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), max_size=9).map(
        lambda rows: "index, module_id\n" + "".join(f"{i}, {m}\n" for i, m in rows)
    ),
)


@settings(max_examples=300)
@given(hlsmi_text)
def test_hlsmi_index_module_map(text):
    try:
        mapping = hlsmi.parse_index_module_map(text)
    except HlSmiError:
        return
    assert len(set(mapping.values())) == len(mapping)
    rows = [{"index": i, "module_id": m} for i, m in mapping.items()]
    assert (
        hlsmi.parse_index_module_map(hlsmi.format_csv(rows, hlsmi.INDEX_MODULE_FIELDS)) == mapping
    )


@given(hlsmi_text, st.sampled_from([None, hlsmi.INDEX_MODULE_FIELDS, hlsmi.DEVICE_FIELDS]))
def test_hlsmi_parse_csv(text, fields):
    try:
        rows = hlsmi.parse_csv(text, fields)
    except HlSmiError:
        return
    assert all(len(row) == len(rows[0]) for row in rows)


@given(st.text(max_size=20))
def test_parse_mib(value):
    result = hlsmi.parse_mib(value)
    assert result is None or result >= 0


@pytest.mark.parametrize("fields", [hlsmi.INDEX_MODULE_FIELDS, hlsmi.DEVICE_FIELDS])
@given(rows=st.lists(st.fixed_dictionaries({}), max_size=0))
def test_format_csv_header_only(fields, rows):
    assert hlsmi.parse_csv(hlsmi.format_csv(rows, fields), fields) == []


@given(
    st.one_of(
        st.text(max_size=12), st.from_regex(r"(HL-?|GAUDI ?)[0-9]{0,3}[A-Z]?", fullmatch=True)
    )
)
def test_generation_from_name(name):
    from hpu_plugin.gaudi.generations import GENERATIONS, generation_from_name

    result = generation_from_name(name)
    assert result is None or result in GENERATIONS.values()


@given(st.text(max_size=12))
@example("0\x1f")  # whitespace to str.strip, not to int()
def test_parse_int(value):
    try:
        number = hlsmi.parse_int(value, "index")
    except HlSmiError:
        return
    assert number >= 0
