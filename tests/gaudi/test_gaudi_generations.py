"""Generations, dtypes, int64, bitsandbytes and lazy/eager rules."""

from __future__ import annotations

import pytest

from hpu_plugin.gaudi import environment, generations, modes
from hpu_plugin.gaudi.config_error import GaudiConfigError
from hpu_plugin.gaudi.generations import GAUDI, GAUDI2, GAUDI3


@pytest.mark.parametrize(
    ("name", "generation"),
    [
        ("GAUDI", GAUDI),
        ("GAUDI2", GAUDI2),
        ("GAUDI3", GAUDI3),
        ("gaudi2", GAUDI2),
        ("Gaudi2B", GAUDI2),
        ("GAUDI1", GAUDI),
        ("HL-205", GAUDI),
        ("HL-225", GAUDI2),
        ("HL-225H", GAUDI2),
        ("HL-325L", GAUDI3),
        ("HL-338", GAUDI3),
        ("A100", None),
        ("", None),
        ("GAUDI4", None),
    ],
)
def test_generation_from_name(name, generation):
    assert generations.generation_from_name(name) is generation


@pytest.mark.parametrize(
    ("feature", "gaudi", "gaudi2", "gaudi3"),
    [
        ("bf16", True, True, True),
        ("fp16", False, True, True),
        ("fp8", False, True, True),
        ("int64", False, True, True),
        ("bitsandbytes", False, True, True),
    ],
)
def test_support_matrix(feature, gaudi, gaudi2, gaudi3):
    assert [g.supports(feature) for g in (GAUDI, GAUDI2, GAUDI3)] == [gaudi, gaudi2, gaudi3]


@pytest.mark.parametrize(
    ("generation", "dtype", "ok"),
    [
        (GAUDI, "bf16", True),
        (GAUDI, "fp32", True),
        (GAUDI, "no", True),
        (GAUDI, "fp16", False),
        (GAUDI, "torch.float16", False),
        (GAUDI, "fp8", False),
        (GAUDI2, "fp16", True),
        (GAUDI2, "fp8", True),
        (GAUDI3, "fp16", True),
        (GAUDI3, "float8_e4m3fn", True),
    ],
)
def test_check_dtype(generation, dtype, ok):
    if ok:
        generations.check_dtype(generation, dtype)
    else:
        with pytest.raises(GaudiConfigError, match=f"mixed_precision={dtype!r}.*use bf16"):
            generations.check_dtype(generation, dtype)


@pytest.mark.parametrize(
    ("generation", "environ", "severity", "text"),
    [
        (GAUDI2, {"PT_HPU_LAZY_MODE": "0", "PT_ENABLE_INT64_SUPPORT": "1"}, "ok", "stays int64"),
        (GAUDI3, {"PT_HPU_LAZY_MODE": "0"}, "ok", "stays int64"),  # eager default is on
        (GAUDI, {"PT_HPU_LAZY_MODE": "0", "PT_ENABLE_INT64_SUPPORT": "1"}, "warning", "no int64"),
        (GAUDI2, {"PT_HPU_LAZY_MODE": "1", "PT_ENABLE_INT64_SUPPORT": "1"}, "ok", "stays int64"),
        (GAUDI2, {"PT_HPU_LAZY_MODE": "1"}, "warning", "defaults to off"),
        (
            GAUDI2,
            {"PT_HPU_LAZY_MODE": "0", "PT_ENABLE_INT64_SUPPORT": "0"},
            "warning",
            "cast to int32",
        ),
        (GAUDI2, {"PT_HPU_LAZY_MODE": "0", "PT_ENABLE_INT64_SUPPORT": "maybe"}, "error", "maybe"),
        (GAUDI2, {"PT_HPU_LAZY_MODE": "off"}, "error", "PT_HPU_LAZY_MODE='off'"),
    ],
)
def test_int64_findings(generation, environ, severity, text):
    (finding,) = generations.int64_findings(generation, environ)
    assert finding.severity == severity
    assert text in finding.message


def test_bitsandbytes_nf4_on_gaudi2_is_fine():
    findings = generations.bitsandbytes_findings(GAUDI2, 4, "nf4", "bfloat16")
    assert [f.severity for f in findings] == ["ok"]


@pytest.mark.parametrize(
    ("generation", "bits", "quant_type", "match"),
    [
        (GAUDI, 4, "nf4", "first-generation Gaudi"),
        (GAUDI, 8, "nf4", "load_in_8bit"),
        (GAUDI2, 4, "fp4", "bnb_4bit_quant_type='fp4'.*'nf4'"),
        (GAUDI3, 2, "nf4", "bits=2"),
    ],
)
def test_bitsandbytes_refusals(generation, bits, quant_type, match):
    with pytest.raises(GaudiConfigError, match=match):
        generations.bitsandbytes_findings(generation, bits, quant_type)


def test_bitsandbytes_8bit_is_supported_and_fp16_compute_is_a_warning():
    # LLM.int8 is supported on Gaudi2/3 (bitsandbytes README; its tests run it on hpu).
    assert [f.severity for f in generations.bitsandbytes_findings(GAUDI3, 8)] == ["ok"]
    severities = [
        f.severity for f in generations.bitsandbytes_findings(GAUDI2, 4, "nf4", "float16")
    ]
    assert severities == ["warning", "ok"]


@pytest.mark.parametrize(
    ("raw", "lazy"),
    [(None, True), ("1", True), ("0", False)],
)
def test_lazy_mode_values(raw, lazy):
    assert environment.parse_lazy_mode(raw) is lazy
    assert environment.is_lazy({} if raw is None else {"PT_HPU_LAZY_MODE": raw}) is lazy


@pytest.mark.parametrize(
    ("raw", "fix"), [("false", "=0 for eager"), ("off", "=0"), ("yes", "=1"), ("2", "=1")]
)
def test_lazy_mode_values_the_gaudi_software_misreads(raw, fix):
    assert environment.is_lazy({"PT_HPU_LAZY_MODE": raw})  # what the Gaudi software does
    with pytest.raises(GaudiConfigError, match=fix):
        environment.parse_lazy_mode(raw)


def test_compile_needs_eager_mode():
    modes.check_compile({"PT_HPU_LAZY_MODE": "0"})
    for environ in ({"PT_HPU_LAZY_MODE": "1"}, {}):
        with pytest.raises(modes.CompileModeError) as info:
            modes.check_compile(environ)
        assert "PT_HPU_LAZY_MODE" in str(info.value) and "set PT_HPU_LAZY_MODE=0" in str(info.value)
    assert modes.mode({"PT_HPU_LAZY_MODE": "0"}).compile_backends == ("hpu_backend", "eager")
    # in lazy mode the switch decides, off when unset (the bridge's common/lazy/utils.cpp)
    lazy = {"PT_HPU_LAZY_MODE": "1", "PT_ENABLE_INT64_SUPPORT": "1"}
    assert generations.int64_on_device(generations.GAUDI2, lazy)
    assert not generations.int64_on_device(generations.GAUDI2, {"PT_HPU_LAZY_MODE": "1"})


def test_defaults_never_override_the_user():
    mine = {"PT_HPU_RECIPE_CACHE_CONFIG": "/data/recipes,true"}
    environ = {"PT_HPU_LAZY_MODE": "1", **mine}
    applied = environment.apply_defaults(environ)
    assert applied == {"PT_ENABLE_INT64_SUPPORT": "1"}
    assert environ == {"PT_HPU_LAZY_MODE": "1", "PT_ENABLE_INT64_SUPPORT": "1", **mine}
    assert environment.apply_defaults(environ) == {}
    # the older single-path setting is a choice too: no second cache beside it
    legacy = {"PT_RECIPE_CACHE_PATH": "/data/recipes"}
    assert "PT_HPU_RECIPE_CACHE_CONFIG" not in environment.apply_defaults(legacy)
    fresh: dict[str, str] = {"XDG_CACHE_HOME": "/home/u/.cache"}
    environment.apply_defaults(fresh)
    assert fresh == {"PT_HPU_LAZY_MODE": "0", "PT_ENABLE_INT64_SUPPORT": "1",
                     "XDG_CACHE_HOME": "/home/u/.cache",
                     "PT_HPU_RECIPE_CACHE_CONFIG": "/home/u/.cache/hpu_plugin/recipes,false,1024"}
