"""Gaudi fp8 for Transformers users: what a script imports to ask for it in code.

``from_pretrained(path, quantization_config=GaudiFp8Config("./fp8/measure"))`` on Gaudi 2 or
3 runs Intel Neural Compressor's fp8 flow inside the load: the first run measures (the
model computes as loaded and records what Neural Compressor needs; ``finish_measurement``
or the program's exit writes it), later runs load the model in fp8 from that measurement.
Code that passes nothing gets the same with ``HPU_PLUGIN_FP8=measure|quantize`` and
``HPU_PLUGIN_FP8_STATS``. Importing this module imports Transformers (the config is one of
its ``QuantizationConfigMixin``); the plugin itself never imports it.
"""

from __future__ import annotations

from hpu_plugin.hosts.transformers_fp8 import (
    QUANT_METHOD,
    config_class,
    finish_measurement,
    measurement_exists,
)

#: The ``quantization_config`` of Gaudi fp8 (``quant_method="gaudi_fp8"``).
GaudiFp8Config = config_class()

__all__ = ["QUANT_METHOD", "GaudiFp8Config", "finish_measurement", "measurement_exists"]
