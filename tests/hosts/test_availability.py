"""Transformers' and Accelerate's availability helpers answer from the registry."""

from __future__ import annotations

import logging
import sys

import pytest

from hpu_plugin import hosts, reporting
from hpu_plugin.hosts import replacing, transformers_adapter

from .answering import AnsweringPlugin


def _binders(function_name: str, origin: str) -> list[str]:
    """Every loaded module that holds the origin's current function under that name."""
    current = getattr(sys.modules[origin], function_name)
    return [
        name for name, module in list(sys.modules.items())
        if getattr(module, "__dict__", {}).get(function_name) is current
    ]


def test_transformers_is_torch_hpu_available_follows_the_registry(installed, answers):
    import transformers
    from transformers.utils import import_utils

    assert transformers.is_torch_hpu_available() is True
    assert transformers.utils.is_torch_hpu_available() is True
    # every module that bound the name at import now holds the replacement
    import transformers.trainer_utils as trainer_utils
    import transformers.training_args as training_args

    assert trainer_utils.is_torch_hpu_available is import_utils.is_torch_hpu_available
    assert training_args.is_torch_hpu_available is import_utils.is_torch_hpu_available
    assert len(_binders("is_torch_hpu_available", "transformers.utils.import_utils")) >= 4
    # the host's cache API is kept
    import_utils.is_torch_hpu_available.cache_clear()
    assert import_utils.is_torch_hpu_available() is True


def test_the_compile_constant_marker_is_kept(installed):
    from transformers.utils import import_utils

    hosts.uninstall()
    original = import_utils.is_torch_hpu_available
    inner = getattr(original, "__wrapped__", original)
    had_marker = getattr(inner, "_dynamo_marked_constant", False)
    hosts.install(installed)
    replacement = import_utils.is_torch_hpu_available
    assert replacement is not original
    marked = getattr(replacement.__wrapped__, "_dynamo_marked_constant", False)
    assert marked == had_marker


def test_uninstall_restores_the_host_functions(installed):
    from accelerate.utils import imports
    from transformers.utils import import_utils

    hosts.uninstall()
    # without habana_frameworks the hosts' own checks say no
    assert import_utils.is_torch_hpu_available() is False
    assert imports.is_hpu_available() is False
    assert not getattr(import_utils.is_torch_hpu_available, "__hpu_plugin__", False)


@pytest.mark.parametrize("available", [True, False])
def test_accelerate_is_hpu_available_follows_the_registry(installed, answers, available):
    import accelerate.state
    import accelerate.utils
    from accelerate.utils import imports

    installed._available = None  # the registry caches its answer per process
    answers.available = available
    imports.is_hpu_available.cache_clear()
    assert imports.is_hpu_available() is available
    assert accelerate.state.is_hpu_available is imports.is_hpu_available
    assert accelerate.utils.is_hpu_available is imports.is_hpu_available
    assert imports.is_hpu_available(init_hccl=False) is available


def test_a_registry_that_says_no_keeps_the_hosts_off(answers):
    """A plugin hiding Gaudi: only the availability answers are installed, and say no."""
    import torch
    from accelerate.utils import imports
    from transformers.utils import import_utils

    from hpu_plugin.loader import PluginRecord
    from hpu_plugin.registry import Registry
    from hpu_plugin.switches import Selection

    answers.available = False
    registry = Registry(Selection())
    registry.register(AnsweringPlugin(answers), PluginRecord("answers", "t", "t", "0", False))
    original_compile = torch.compile
    hosts.install(registry)
    try:
        assert import_utils.is_torch_hpu_available() is False
        assert imports.is_hpu_available() is False
        assert getattr(import_utils.is_torch_hpu_available, "__hpu_plugin__", False)
        assert torch.compile is original_compile
    finally:
        hosts.uninstall()
        reporting.said.forget()


@pytest.mark.parametrize(
    ("version", "allowed"),
    [("1.4.0", False), ("1.0.1", False), ("1.5.0", True), ("1.15.0", True), ("1.5.0rc1", True),
     (None, True)],
)
def test_r3_accelerate_below_1_5_turns_transformers_hpu_off(caplog, version, allowed):
    reporting.said.forget()
    with caplog.at_level(logging.WARNING, logger="hpu_plugin"):
        assert transformers_adapter.accelerate_allows_hpu(version) is allowed
        transformers_adapter.accelerate_allows_hpu(version)
    hints = [r.getMessage() for r in caplog.records if "older than 1.5.0" in r.getMessage()]
    assert len(hints) == (0 if allowed else 1)
    if not allowed:
        assert version in hints[0] and "accelerate>=1.5.0" in hints[0]
    reporting.said.forget()


def test_an_adapter_that_finds_nothing_logs_one_line_and_stays_out(caplog):
    """A host release without the expected function (Transformers < 4.51, say)."""
    import types

    from hpu_plugin import patching
    from hpu_plugin.hosts import accelerate_adapter
    from hpu_plugin.registry import Registry
    from hpu_plugin.switches import Selection

    reporting.said.forget()
    patches = patching.Patches()
    empty = types.ModuleType("transformers.utils.import_utils")
    with caplog.at_level(logging.WARNING, logger="hpu_plugin"):
        for _ in range(2):
            transformers_adapter.install_availability(Registry(Selection()), patches, empty)
            accelerate_adapter.install_availability(Registry(Selection()), patches, empty)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "transformers" in lines[0] and replacing.host_version("transformers") in lines[0]
    assert "accelerate" in lines[1] and "1.5.0" in lines[1]
    assert not empty.__dict__.get("is_torch_hpu_available")
    patches.undo()
    reporting.said.forget()
