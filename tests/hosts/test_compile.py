"""``torch.compile`` takes its backend from the registry; the call's other arguments stay."""

from __future__ import annotations

import logging
import types

import pytest
import torch

from hpu_plugin.hookspecs import Refusal


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


def _install_transformers_wrapper() -> None:
    """What Transformers >= 4.55's ``is_torch_hpu_available`` does to ``torch.compile``: the
    same body, under the name and module it has there (the installed release may predate it)."""
    namespace: dict[str, object] = {"__name__": "transformers.utils.import_utils", "torch": torch}
    exec(
        "original_compile = torch.compile\n"
        "def hpu_backend_compile(*args, **kwargs):\n"
        "    if kwargs.get('backend') not in ['hpu_backend', 'eager']:\n"
        "        kwargs['backend'] = 'hpu_backend'\n"
        "    return original_compile(*args, **kwargs)\n"
        "torch.compile = hpu_backend_compile\n",
        namespace,
    )


def test_transformers_own_hpu_compile_wrapper_leaves_the_backend_to_the_hooks(installed, answers):
    ours = torch.compile
    _install_transformers_wrapper()
    assert torch.compile is not ours
    answers.calls.clear()
    double = torch.compile(lambda x: x * 2)  # the wrapper turns no backend into hpu_backend
    assert answers.calls == [("compile", None)]  # the hooks were asked as the user asked
    assert torch.compile is ours  # and the wrapper is gone
    assert torch.equal(double(torch.ones(2)), torch.full((2,), 2.0))
    _install_transformers_wrapper()
    answers.calls.clear()

    @torch.compile(dynamic=True)  # as a decorator factory, through the wrapper
    def triple(x):
        return x * 3

    assert answers.calls == [("compile", None)]
    assert torch.equal(triple(torch.ones(2)), torch.full((2,), 3.0))
    _install_transformers_wrapper()
    answers.calls.clear()
    torch.compile(lambda x: x, backend="eager")  # passed through by the wrapper as asked
    assert answers.calls == [("compile", "eager")]


def test_the_torch_module_keeps_its_class(installed):
    # Dynamo before torch 2.13 breaks the graph at an ``import torch`` of any other class
    assert type(torch) is types.ModuleType
