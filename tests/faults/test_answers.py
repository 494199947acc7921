"""A hook answer of the right type but impossible is refused, naming the plugin; a
possible one is kept as it is."""

from __future__ import annotations

import logging

import pytest

from hpu_plugin.registry import Registry
from hpu_plugin.switches import Selection

QUANT = "hpu_quantization_device_map(method, bits, device_map, options)"
COMPILE = "hpu_compile_backend(requested)"


def _registry(site, signature: str, answer: object) -> Registry:
    site.add("answers", "from hpu_plugin.hookspecs import hookimpl\n\n"
             f"@hookimpl(tryfirst=True)\ndef {signature}:\n    return {answer!r}\n",
             dist="answer-dist", version="0.3")
    registry = Registry(Selection())
    registry.load_entry_points(site.entry_points())
    return registry


def _quant(registry: Registry) -> object:
    return registry.quantization_device_map("bitsandbytes", 4, None)


def _refusals(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if "plugin 'answers'" in r.getMessage() and r.levelno >= logging.WARNING]


@pytest.mark.parametrize("answer", [
    {"": "cuda:0"}, {"": "xpu"}, {"model.layer": "cuda"}, {"": -1}, {"": "hpu:x"}, "cuda:1",
    {"": True}, {"": "hpu:0", "lm_head": "mps"},
])
def test_impossible_device_map_is_refused_naming_the_plugin(site, caplog, answer):
    registry = _registry(site, QUANT, answer)
    assert _quant(registry) != answer
    [message] = _refusals(caplog)
    assert "answer-dist 0.3" in message and "refused" in message and "device map" in message
    assert registry.records["answers"].status == "faulted"


@pytest.mark.parametrize("answer", [
    {"": "hpu:0"}, {"": 0}, {"": "hpu"}, {"a": "cpu", "b": "disk"}, "auto", "hpu",
])
def test_possible_device_map_is_kept(site, caplog, answer):
    registry = _registry(site, QUANT, answer)
    assert _quant(registry) == answer
    assert not _refusals(caplog)


@pytest.mark.parametrize("answer", ["bogus", "", "inductorr"])
def test_unknown_compile_backend_is_refused_naming_the_plugin(site, caplog, answer):
    registry = _registry(site, COMPILE, answer)
    assert registry.compile_backend(None) == "hpu_backend"  # the next plugin's answer
    [message] = _refusals(caplog)
    assert "answer-dist 0.3" in message and "compile backend" in message


@pytest.mark.parametrize("answer", ["eager", "hpu_backend", "aot_eager"])
def test_known_compile_backend_is_kept(site, caplog, answer):
    registry = _registry(site, COMPILE, answer)
    assert registry.compile_backend(None) == answer
    assert not _refusals(caplog)
