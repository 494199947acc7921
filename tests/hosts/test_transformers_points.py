"""Transformers decision points routed by class wraps: bnb placement, compile backend."""

from __future__ import annotations

from importlib import metadata

import pytest

from hpu_plugin.hookspecs import DeviceProperties


def _quantizer(bits: int):
    from transformers import BitsAndBytesConfig
    from transformers.quantizers import quantizer_bnb_4bit, quantizer_bnb_8bit

    cls = {4: quantizer_bnb_4bit.Bnb4BitHfQuantizer, 8: quantizer_bnb_8bit.Bnb8BitHfQuantizer}[bits]
    try:
        return cls(BitsAndBytesConfig(**{f"load_in_{bits}bit": True}))
    except metadata.PackageNotFoundError:
        # Transformers 4.51's 4-bit config reads the bitsandbytes version; update_device_map
        # uses no state, so the real method runs on an instance without a config.
        return object.__new__(cls)


@pytest.mark.parametrize("bits", [4, 8])
def test_bnb_without_device_map_goes_where_the_hook_says(installed, answers, bits):
    answers.properties = DeviceProperties("hpu", 2, 0, "GAUDI2")
    answers.device_map = {"": "hpu:0"}
    assert _quantizer(bits).update_device_map(None) == {"": "hpu:0"}
    assert ("quant", ("bitsandbytes", bits, None)) in answers.calls


@pytest.mark.parametrize("bits", [4, 8])
def test_bnb_keeps_the_users_device_map(installed, answers, bits):
    answers.device_map = {"": "hpu:0"}
    assert _quantizer(bits).update_device_map({"": "cpu"}) == {"": "cpu"}
    assert ("quant", ("bitsandbytes", bits, {"": "cpu"})) in answers.calls


@pytest.mark.parametrize("bits", [4, 8])
def test_bnb_refusal_reaches_the_caller(installed, answers, bits):
    from hpu_plugin.hookspecs import Refusal, hookimpl
    from hpu_plugin.loader import PluginRecord

    class RefuseEight:
        @hookimpl(tryfirst=True)
        def hpu_quantization_device_map(self, method, bits, device_map):
            if bits == 8:
                raise Refusal("8-bit refused by the test plugin: use load_in_4bit=True")
            return None

    installed.register(RefuseEight(), PluginRecord("refuse8", "t", "t", "0", False))
    answers.device_map = {"": "hpu:0"}
    if bits == 8:
        with pytest.raises(Refusal, match="load_in_4bit"):
            _quantizer(bits).update_device_map(None)
    else:
        assert _quantizer(bits).update_device_map(None) == {"": "hpu:0"}


def test_training_args_on_cpu_keep_their_compile_backend(installed, answers, tmp_path):
    """``use_cpu=True`` is the user's choice of device: no HPU backend for it."""
    from transformers import TrainingArguments

    answers.compile_backend = "hpu_backend"
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, torch_compile=True)
    assert args.torch_compile_backend == "inductor"
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, torch_compile_backend="eager")
    assert args.torch_compile_backend == "eager"
