"""``torch.compile`` takes its backend from the registry; the call's other arguments stay."""

from __future__ import annotations

import logging
import types

import pytest
import torch

from hpu_plugin import hosts
from hpu_plugin.hookspecs import Refusal
from hpu_plugin.hosts import support, torch_adapter
from hpu_plugin.patching import host_version, this_process


def _switch_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "torch.compile backend" in r.getMessage()]


def test_default_backend_is_switched_with_one_warning_per_backend(installed, answers, caplog):
    def double(x):
        return x * 2

    with caplog.at_level(logging.WARNING, logger="hpu_plugin"):
        for _ in range(3):
            compiled = torch.compile(double)
            assert torch.equal(compiled(torch.ones(3)), torch.full((3,), 2.0))
        torch.compile(double, backend="inductor")
        torch.compile(double, backend="inductor")
    assert ("compile", None) in answers.calls
    assert ("compile", "inductor") in answers.calls
    warnings = _switch_warnings(caplog)
    assert len(warnings) == 2, warnings
    assert "'eager'" in warnings[0]


def test_the_call_keeps_its_other_arguments(installed, answers):
    def breaks(x):
        torch._dynamo.graph_break()
        return x + 1

    torch._dynamo.reset()
    with pytest.raises(Exception, match=r"(?i)graph.?break|fullgraph"):
        torch.compile(breaks, fullgraph=True)(torch.ones(2))
    torch._dynamo.reset()
    assert torch.equal(torch.compile(breaks)(torch.ones(2)), torch.full((2,), 2.0))


def test_decorator_defined_after_activation_asks_the_hook(installed, answers):
    seen = []

    def recording_backend(gm, example_inputs):
        seen.append(len(example_inputs))
        return gm.forward

    answers.compile_backend = recording_backend

    @torch.compile(dynamic=True)
    def triple(x):
        return x * 3

    torch._dynamo.reset()
    assert torch.equal(triple(torch.ones(4)), torch.full((4,), 3.0))
    assert seen, "the hook's backend compiled the decorated function"
    assert ("compile", None) in answers.calls


def test_a_backend_the_hook_keeps_is_used_unchanged(installed, answers, caplog):
    used = []

    def my_backend(gm, example_inputs):
        used.append(True)
        return gm.forward

    answers.compile_backend = None  # no opinion: the caller's choice stands
    torch._dynamo.reset()
    with caplog.at_level(logging.WARNING, logger="hpu_plugin"):
        assert torch.equal(torch.compile(lambda x: x - 1, backend=my_backend)(torch.ones(2)),
                           torch.zeros(2))
    assert used
    assert not _switch_warnings(caplog)


def test_a_refusal_reaches_the_caller(installed, answers):
    answers.refuse_compile = True
    with pytest.raises(Refusal, match="refuse_compile"):
        torch.compile(lambda x: x)
    with pytest.raises(Refusal):
        torch.compile()(lambda x: x)


def test_torch_compiler_compile_goes_through_the_hook(installed, answers):
    answers.calls.clear()
    torch.compiler.compile(lambda x: x, backend="inductor")
    assert ("compile", "inductor") in answers.calls


def _transformers_wrapper() -> object:
    # the name and module Transformers >= 4.55 gives its wrapper inside is_torch_hpu_available
    namespace: dict[str, object] = {"__name__": "transformers.utils.import_utils"}
    exec("def hpu_backend_compile(*args, **kwargs):\n    return None", namespace)
    return namespace["hpu_backend_compile"]


INSTALLED_HAS_WRAPPER = torch_adapter.transformers_has_compile_wrapper(
    host_version("transformers")
)


@pytest.mark.skipif(not INSTALLED_HAS_WRAPPER, reason="this Transformers has no compile wrapper")
def test_transformers_own_hpu_compile_wrapper_cannot_replace_the_interceptor(installed):
    ours = torch.compile
    assert "torch.__class__" in this_process.hosts.made
    torch.compile = _transformers_wrapper()
    assert torch.compile is ours
    # any other assignment is a user's or another library's, and goes through
    other = object()
    torch.some_attribute_for_the_test = other
    assert torch.some_attribute_for_the_test is other
    del torch.some_attribute_for_the_test


@pytest.mark.skipif(INSTALLED_HAS_WRAPPER, reason="this Transformers has a compile wrapper")
def test_without_the_wrapper_the_torch_module_keeps_its_class(installed):
    assert "torch.__class__" not in this_process.hosts.made
    assert type(torch) is types.ModuleType


def test_the_torch_module_class_is_given_back_on_undo(installed):
    hosts.uninstall()
    assert type(torch) is types.ModuleType


@pytest.mark.parametrize(
    ("version", "wrapper"),
    [("4.51.3", False), ("4.54.1", False), ("4.55.0", True), ("4.55.0rc1", True),
     ("4.57.6", True), ("5.24.0", True), ("?", False)],
)
def test_the_guard_follows_the_transformers_release(version, wrapper):
    assert support.TRANSFORMERS_COMPILE_WRAPPER_SINCE == "4.55"
    assert torch_adapter.transformers_has_compile_wrapper(version) is wrapper
