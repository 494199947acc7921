"""The quantization placement plugin: where a quantized model goes, and what it refuses.

The hook is asked through a real registry loaded from this distribution's entry points,
as the Transformers adapter asks it. Without Gaudi or the emulator there is no
``torch.hpu``; the device tests put a minimal one in its place (``device``), giving the
plugin the answers real Gaudi software gives (``get_device_name()``, ``current_device()``).
"""

from __future__ import annotations

import types

import pytest
import torch

from hpu_plugin import reporting
from hpu_plugin.hookspecs import Refusal, hookimpl
from hpu_plugin.loader import PluginRecord
from hpu_plugin.plugins import quantization
from hpu_plugin.registry import Registry
from hpu_plugin.switches import Selection


@pytest.fixture
def registry() -> Registry:
    registry = Registry(Selection(only=frozenset({"quantization"})))
    registry.load_entry_points()
    assert registry.records["quantization"].status == "enabled"
    return registry


def device(monkeypatch: pytest.MonkeyPatch, generation: str = "GAUDI2", current: int = 0) -> None:
    hpu = types.SimpleNamespace(
        is_available=lambda: True,
        device_count=lambda: 8,
        current_device=lambda: current,
        get_device_name=lambda device=None: generation,
    )
    monkeypatch.setattr(torch, "hpu", hpu, raising=False)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("generation", ["GAUDI2", "GAUDI3"])
def test_no_device_map_places_on_current_hpu(registry, monkeypatch, bits, generation):
    device(monkeypatch, generation)  # a Gaudi process's one device is hpu:0
    assert registry.quantization_device_map("bitsandbytes", bits, None) == {"": "hpu:0"}


@pytest.mark.parametrize(
    "device_map", ["auto", "hpu", "hpu:1", "cpu", {"": "hpu:0"}, {"model": 0, "lm_head": "cpu"}]
)
def test_user_device_map_is_left_to_the_user(registry, monkeypatch, device_map):
    device(monkeypatch)
    assert registry.quantization_device_map("bitsandbytes", 4, device_map) is None


def test_other_methods_get_no_opinion(registry, monkeypatch):
    device(monkeypatch, "GAUDI")  # would be refused for bitsandbytes on hpu
    assert registry.quantization_device_map("gptq", 4, None) is None


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("device_map", [None, "auto", "hpu", {"": "hpu:0"}, {"a": "cpu", "b": 0}])
def test_first_generation_gaudi_is_refused_when_loading_onto_it(
    registry, monkeypatch, bits, device_map
):
    device(monkeypatch, "GAUDI")
    with pytest.raises(Refusal) as refused:
        registry.quantization_device_map("bitsandbytes", bits, device_map)
    message = str(refused.value)
    assert f"load_in_{bits}bit=True" in message
    assert "first-generation Gaudi" in message and "GAUDI2" in message
    assert isinstance(refused.value, ValueError)


@pytest.mark.parametrize("device_map", ["cpu", {"": "cpu"}, {"a": "cpu", "b": "disk"}])
def test_first_generation_gaudi_may_quantize_on_the_cpu(registry, monkeypatch, device_map):
    device(monkeypatch, "GAUDI")
    assert registry.quantization_device_map("bitsandbytes", 4, device_map) is None


@pytest.mark.parametrize(
    ("options", "setting", "fix"),
    [
        ({"quant_type": "fp4"}, "bnb_4bit_quant_type='fp4'", "bnb_4bit_quant_type='nf4'"),
        (
            {"quant_storage": torch.float32},
            "bnb_4bit_quant_storage='torch.float32'",
            "torch.bfloat16",
        ),
        ({"quant_storage": "int8"}, "bnb_4bit_quant_storage='torch.int8'", "torch.uint8"),
    ],
)
def test_4bit_settings_the_hpu_backend_cannot_run_are_refused(options, setting, fix):
    with pytest.raises(Refusal) as refused:
        quantization.decide("bitsandbytes", 4, None, "GAUDI2", 0, options)
    assert setting in str(refused.value)
    assert fix in str(refused.value)


def test_fp16_compute_is_placed_with_a_warning(caplog, monkeypatch):
    """bitsandbytes' HPU kernel accepts float16 but its tests never run it on HPU: warn."""
    monkeypatch.setattr(reporting, "said", reporting.Once())  # each warning is logged once
    options = {"quant_type": "nf4", "compute_dtype": torch.float16}
    with caplog.at_level("WARNING", logger="hpu_plugin"):
        assert quantization.decide("bitsandbytes", 4, None, "GAUDI2", 0, options) == {
            "": "hpu:0"
        }
    assert "bnb_4bit_compute_dtype=torch.bfloat16" in caplog.text


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"quant_type": "nf4"},
        {"quant_type": "nf4", "quant_storage": torch.uint8, "compute_dtype": torch.bfloat16},
        {"quant_type": "nf4", "quant_storage": "torch.bfloat16", "compute_dtype": "float32"},
        {"quant_type": None, "quant_storage": None, "compute_dtype": None},
    ],
)
def test_4bit_settings_the_hpu_backend_runs_are_placed(options):
    assert quantization.decide("bitsandbytes", 4, None, "GAUDI3", 1, options) == {"": "hpu:1"}


def test_4bit_options_do_not_apply_to_8bit_or_to_cpu_placement():
    fp4 = {"quant_type": "fp4", "compute_dtype": torch.float16}
    assert quantization.decide("bitsandbytes", 8, None, "GAUDI2", 0, fp4) == {"": "hpu:0"}
    assert quantization.decide("bitsandbytes", 4, "cpu", "GAUDI2", 0, fp4) is None


def test_unknown_bit_width_is_refused():
    with pytest.raises(Refusal, match="bits=3"):
        quantization.decide("bitsandbytes", 3, None, "GAUDI2", 0)


def test_registry_hands_the_4bit_options_to_the_plugin(registry, monkeypatch):
    device(monkeypatch)
    with pytest.raises(Refusal, match="bnb_4bit_quant_type='fp4'"):
        registry.quantization_device_map(
            "bitsandbytes", 4, None, options={"quant_type": "fp4"}
        )
    nf4 = {"quant_type": "nf4", "quant_storage": torch.uint8, "compute_dtype": torch.float32}
    assert registry.quantization_device_map("bitsandbytes", 4, None, options=nf4) == {
        "": "hpu:0"
    }


class _EagerPlacement:
    """A third party that places every quantized model on the HPU, first."""

    @hookimpl(tryfirst=True)
    def hpu_quantization_device_map(self, device_map):
        return {"": "hpu:0"} if device_map is None else None


class _CpuPlacement:
    @hookimpl(tryfirst=True)
    def hpu_quantization_device_map(self, device_map):
        return {"": "cpu"} if device_map is None else None


def _with_third_party(registry: Registry, plugin: object, name: str) -> Registry:
    registry.register(plugin, PluginRecord(name, f"tests:{name}", "tests", "0", first_party=False))
    return registry


def test_a_third_party_placement_first_does_not_bypass_the_refusals(registry, monkeypatch):
    # The refusal checks the final answer, whoever gave it (a wrapper, not a plain impl).
    device(monkeypatch, "GAUDI")
    _with_third_party(registry, _EagerPlacement(), "eager-placement")
    with pytest.raises(Refusal, match="first-generation Gaudi"):
        registry.quantization_device_map("bitsandbytes", 4, None, options={})
    device(monkeypatch, "GAUDI2")
    with pytest.raises(Refusal, match="bnb_4bit_quant_type='fp4'"):
        registry.quantization_device_map("bitsandbytes", 4, None, {"quant_type": "fp4"})


def test_a_third_party_placement_off_the_hpu_is_not_refused(registry, monkeypatch):
    device(monkeypatch, "GAUDI")
    _with_third_party(registry, _CpuPlacement(), "cpu-placement")
    placed = registry.quantization_device_map("bitsandbytes", 4, None, {"quant_type": "fp4"})
    assert placed == {"": "cpu"}


# Gaudi fp8 (Neural Compressor through the Transformers adapter's gaudi_fp8 method)


@pytest.mark.parametrize("generation", ["GAUDI2", "GAUDI3"])
def test_fp8_with_no_device_map_is_placed_on_the_current_hpu(registry, monkeypatch, generation):
    device(monkeypatch, generation)
    assert registry.quantization_device_map("gaudi_fp8", 8, None) == {"": "hpu:0"}
    assert registry.quantization_device_map("gaudi_fp8", 8, "hpu") is None  # the user's


@pytest.mark.parametrize("device_map", [None, "auto", "hpu", {"": "hpu:0"}])
def test_fp8_on_first_generation_gaudi_is_refused(registry, monkeypatch, device_map):
    device(monkeypatch, "GAUDI")
    with pytest.raises(Refusal) as refused:
        registry.quantization_device_map("gaudi_fp8", 8, device_map)
    message = str(refused.value)
    assert message.startswith("quantization_config (gaudi_fp8)='fp8': fp8 is not available "
                              "on first-generation Gaudi")
    assert "unset HPU_PLUGIN_FP8" in message


def test_a_third_party_fp8_placement_is_used_and_still_checked(registry, monkeypatch):
    _with_third_party(registry, _EagerPlacement(), "eager-placement")
    # the plugin would say hpu:3; the third party, asked first, says hpu:0
    device(monkeypatch, "GAUDI2", current=3)
    assert registry.quantization_device_map("gaudi_fp8", 8, None) == {"": "hpu:0"}
    device(monkeypatch, "GAUDI")
    with pytest.raises(Refusal, match="first-generation Gaudi"):
        registry.quantization_device_map("gaudi_fp8", 8, None)
