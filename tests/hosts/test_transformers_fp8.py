"""The Gaudi fp8 adapter on the real Transformers: registration, placement, the switch.

What Neural Compressor then does to the model runs on the emulator
(``tests/quantization/test_gaudi_fp8.py``); here the adapter's decisions are checked against
Transformers' own registry and ``get_hf_quantizer``, with "Gaudi ready" from the answering
test plugin.
"""

from __future__ import annotations

import importlib.util
import inspect
import types

import pytest

from hpu_plugin import patching
from hpu_plugin.gaudi.config_error import GaudiConfigError
from hpu_plugin.hookspecs import Refusal
from hpu_plugin.hosts import transformers_fp8
from hpu_plugin.patching import Patches

SWITCH = {"HPU_PLUGIN_FP8": "quantize", "HPU_PLUGIN_FP8_STATS": "/somewhere/measure"}


def _has_registry() -> bool:
    import transformers.modeling_utils
    from transformers.quantizers import auto

    return (hasattr(auto, "register_quantizer")
            and hasattr(transformers.modeling_utils, "get_hf_quantizer"))


@pytest.fixture
def fp8_installed(installed):
    import transformers.modeling_utils
    from transformers.quantizers import auto

    if not transformers_fp8.supported() or not _has_registry():
        pytest.skip("the fp8 adapter is written for Transformers 5 and later")
    assert auto.AUTO_QUANTIZER_MAPPING["gaudi_fp8"] is transformers_fp8.quantizer_class()
    assert patching.is_ours(transformers.modeling_utils.get_hf_quantizer)
    return installed


@pytest.fixture
def fp8_with_inc(fp8_installed):
    """The adapter with Neural Compressor present, which its quantizer runs (Intel's Gaudi
    images carry it; a plain pip environment may not)."""
    if importlib.util.find_spec("neural_compressor") is None:
        pytest.skip("Neural Compressor is not installed here: the quantizer refuses, naming "
                    "the install (test_without_neural_compressor_the_quantizer_names_it)")
    return fp8_installed


def test_without_neural_compressor_the_quantizer_names_it(fp8_installed, tmp_path):
    from transformers.quantizers import auto

    if importlib.util.find_spec("neural_compressor") is not None:
        pytest.skip("Neural Compressor is installed here")
    config = transformers_fp8.config_class()(str(tmp_path / "measure"), mode="measure")
    quantizer = auto.AutoHfQuantizer.from_config(config, pre_quantized=False)
    with pytest.raises(ImportError, match=r"pip install 'neural-compressor\[pt\]'"):
        quantizer.validate_environment(device_map=None)


def test_the_method_is_registered_and_undone(fp8_installed):
    import transformers.modeling_utils
    from transformers.quantizers import auto

    from hpu_plugin import hosts

    config = auto.AutoQuantizationConfig.from_dict(
        {"quant_method": "gaudi_fp8", "dump_stats_path": "/x/measure", "mode": "measure"})
    assert type(config) is transformers_fp8.config_class()
    assert (config.dump_stats_path, config.mode, config.resolved_mode()) == (
        "/x/measure", "measure", "measure")
    assert type(auto.AutoHfQuantizer.from_config(config, pre_quantized=False)).__name__ == (
        "GaudiFp8HfQuantizer")
    hosts.uninstall()
    assert "gaudi_fp8" not in auto.AUTO_QUANTIZER_MAPPING
    assert "gaudi_fp8" not in auto.AUTO_QUANTIZATION_CONFIG_MAPPING
    assert not patching.is_ours(transformers.modeling_utils.get_hf_quantizer)
    assert transformers_fp8.quantizer_class().registry is None


def test_a_transformers_without_the_registry_is_stayed_out_of(installed):
    if not transformers_fp8.supported():
        pytest.skip("the fp8 adapter is written for Transformers 5 and later")
    patches = Patches()
    transformers_fp8.install_registration(installed, patches, types.ModuleType("auto"))
    assert patches.made == []
    [why] = [v for k, v in patching.this_process.stayed_out.items() if "fp8" in k]
    assert "register_quantizer" in why


def test_the_quantizer_places_through_the_hook(fp8_installed, answers):
    from transformers.quantizers import auto

    config = transformers_fp8.config_class()("/x/measure", mode="measure")
    quantizer = auto.AutoHfQuantizer.from_config(config, pre_quantized=False)
    answers.device_map = {"": "hpu:0"}
    assert quantizer.update_device_map(None) == {"": "hpu:0"}
    assert quantizer.update_device_map("hpu") == "hpu"  # the user's
    # Neural Compressor would move a CPU placement to the Gaudi: refused, not overridden
    with pytest.raises(GaudiConfigError, match="device_map='cpu': gaudi_fp8 cannot keep"):
        quantizer.update_device_map("cpu")
    assert ("quant", ("gaudi_fp8", 8, None)) in answers.calls
    answers.device_map = None
    assert quantizer.update_device_map(None) is None


def test_quantize_mode_without_a_measurement_is_refused(fp8_with_inc, tmp_path):
    from transformers.quantizers import auto

    config = transformers_fp8.config_class()(str(tmp_path / "measure"), mode="quantize")
    quantizer = auto.AutoHfQuantizer.from_config(config, pre_quantized=False)
    with pytest.raises(Refusal, match=r"no measurement at .*/measure_hooks_maxabs\.npz to"):
        quantizer.validate_environment(device_map=None)
    (tmp_path / "measure_hooks_maxabs.npz").write_bytes(b"")
    quantizer.validate_environment(device_map=None)
    assert transformers_fp8.config_class()(str(tmp_path / "measure")).resolved_mode() == (
        "quantize")


@pytest.mark.parametrize("mode", ["fp8", ""])
def test_a_bad_mode_is_refused_by_the_config(fp8_installed, mode):
    with pytest.raises(ValueError, match="accepted modes are auto, measure, quantize"):
        transformers_fp8.config_class()("/x/measure", mode=mode)


def _config(**fields):
    return types.SimpleNamespace(**fields)


def test_the_switch_gives_a_config_only_where_the_user_gave_none(fp8_installed):
    from transformers import BitsAndBytesConfig

    chosen = transformers_fp8.switch_config(_config(), None, None, SWITCH)
    assert type(chosen) is transformers_fp8.config_class()
    assert (chosen.mode, chosen.dump_stats_path) == ("quantize", "/somewhere/measure")
    mine = BitsAndBytesConfig(load_in_8bit=True)
    assert transformers_fp8.switch_config(_config(), mine, None, SWITCH) is mine
    # a checkpoint quantized already, a model the user puts on the CPU, the switch off
    assert transformers_fp8.switch_config(
        _config(quantization_config={"quant_method": "fp8"}), None, None, SWITCH) is None
    assert transformers_fp8.switch_config(_config(), None, "cpu", SWITCH) is None
    assert transformers_fp8.switch_config(_config(), None, None, {}) is None
    for on_hpu in ("hpu", "hpu:0", "auto", 0, {"": "hpu:0"}, {"a": "cpu", "b": 0}):
        assert transformers_fp8.switch_config(_config(), None, on_hpu, SWITCH) is not None


def test_get_hf_quantizer_follows_the_switch(fp8_with_inc, monkeypatch):
    from transformers import LlamaConfig, modeling_utils

    monkeypatch.setenv("HPU_PLUGIN_FP8", "measure")
    monkeypatch.setenv("HPU_PLUGIN_FP8_STATS", "/somewhere/measure")
    # 4.x also takes dtype, from_tf and from_flax
    wanted = inspect.signature(modeling_utils.get_hf_quantizer.__wrapped__).parameters
    rest = {k: v for k, v in {"dtype": None, "from_tf": False, "from_flax": False,
                              "weights_only": True, "user_agent": {}}.items() if k in wanted}
    quantizer, config, device_map = modeling_utils.get_hf_quantizer(
        LlamaConfig(), None, device_map="cpu", **rest)
    assert quantizer is None  # placed on the CPU by the user: not switched
    quantizer, config, device_map = modeling_utils.get_hf_quantizer(
        LlamaConfig(), None, device_map="hpu", **rest)
    assert type(quantizer).__name__ == "GaudiFp8HfQuantizer"
    assert config.quantization_config.mode == "measure"
    assert device_map == "hpu"


def test_on_transformers_4_the_config_and_the_switch_name_the_upgrade(installed, monkeypatch,
                                                                    caplog):
    import transformers.modeling_utils

    from hpu_plugin import reporting

    if transformers_fp8.supported():
        pytest.skip("Transformers 5 or later: the adapter applies")
    with pytest.raises(GaudiConfigError, match=r"needs Transformers 5\.0 or later"):
        transformers_fp8.config_class()(dump_stats_path="/x/measure")
    monkeypatch.setenv("HPU_PLUGIN_FP8", "measure")
    monkeypatch.setenv("HPU_PLUGIN_FP8_STATS", "/x/measure")
    reporting.said.forget()
    patches = Patches()
    with caplog.at_level("WARNING", logger="hpu_plugin"):
        transformers_fp8.install_switch(installed, patches, transformers.modeling_utils)
    assert patches.made == []
    [line] = [r.getMessage() for r in caplog.records if "HPU_PLUGIN_FP8" in r.getMessage()]
    assert "is not applied" in line and "unset HPU_PLUGIN_FP8" in line


@pytest.mark.parametrize(("scale_method", "needed"), [
    (None, True),  # Neural Compressor's default, maxabs_hw, scales from the measurement
    ("maxabs_pow2", True),
    ("unit_scale", False),
    (" HW_ALIGNED_SINGLE_SCALE ", False),
    ({"default": {"weight": {"scale_value_type": "FIXED_VALUE"},
                  "activation": {"scale_value_type": "fixed_value"}}}, False),
    ({"default": {"weight": {"scale_value_type": "fixed_value"},
                  "activation": {"scale_value_type": "fixed_value"}},
      "layers": {"3": {"weight": {"scale_value_type": "maxabs"},
                       "activation": {"scale_value_type": "fixed_value"}}}}, True),
    ({"layers": {}}, True),  # no default: Neural Compressor refuses it when it parses
])
def test_only_fixed_scales_quantize_without_a_measurement(scale_method, needed):
    options = {} if scale_method is None else {"scale_method": scale_method}
    assert transformers_fp8.needs_measurement(options) is needed


@pytest.mark.parametrize(("dynamic", "needed"), [(True, False), ("true", False),
                                                 (False, True), ("False", True)])
def test_dynamic_quantization_reads_no_measurement(dynamic, needed):
    options = {"scale_method": "maxabs_pcs_pow2", "dynamic_quantization": dynamic}
    assert transformers_fp8.needs_measurement(options) is needed


@pytest.mark.parametrize(("env", "options", "found"), [
    ({}, {}, "m_hooks_maxabs.npz"),
    ({"LOCAL_RANK": "1", "WORLD_SIZE": "2"}, {}, "m_hooks_maxabs_1_2.npz"),
    ({"LOCAL_RANK": "0", "WORLD_SIZE": "2"}, {"observer": "save"}, "m_hooks_save_0_2.npz"),
    ({"LOCAL_RANK": "1", "WORLD_SIZE": "2"}, {"seperate_measure_files": False},
     "m_hooks_maxabs.npz"),
])
def test_each_rank_reads_the_measurement_neural_compressor_names(monkeypatch, tmp_path, env,
                                                                 options, found):
    """Neural Compressor's ``Fp8cfg.parse``: ``<path>_hooks_<observer>[_<rank>_<world>]``;
    another rank's file, or the scale file a quantize run writes beside it, is not this
    process's measurement."""
    for name in ("LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    path = str(tmp_path / "m")
    assert transformers_fp8.measurement_file(path, options) == f"{path}{found[1:]}"
    for other in ("m_hooks_maxabs_0_2.npz", "m_hooks_maxabs_1_2.npz", "m_hooks_save_0_2.npz",
                  "m_hooks_maxabs.npz", "m_hooks_maxabs_MAXABS_HW.npz"):
        if other != found:
            (tmp_path / other).write_bytes(b"")
    assert not transformers_fp8.measurement_exists(path, options)
    (tmp_path / found).write_bytes(b"")
    assert transformers_fp8.measurement_exists(path, options)
