"""In-process tests of the adapters against the real host modules.

"Gaudi ready" comes from a test plugin registered on a fresh Registry: the adapters are
the real ones, installed on the real torch / Transformers / Accelerate and undone after.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hpu_plugin import hosts, patching, reporting
from hpu_plugin.loader import PluginRecord
from hpu_plugin.registry import Registry
from hpu_plugin.switches import Selection

from .answering import AnsweringPlugin, Answers


@pytest.fixture
def answers() -> Answers:
    return Answers()


@pytest.fixture
def installed(answers: Answers) -> Iterator[Registry]:
    """The adapters installed on a registry that holds only the answering plugin."""
    # The hosts must be imported before install: activation inside a real
    # `import torch` meets them in any state, which test_importhook covers.
    import accelerate.commands.env
    import accelerate.commands.launch
    import accelerate.state  # noqa: F401
    import transformers.pipelines.base
    import transformers.training_args  # noqa: F401

    registry = Registry(Selection())
    record = PluginRecord("answers", "tests", "tests", "0", False)
    registry.register(AnsweringPlugin(answers), record)
    hosts.install(registry)
    try:
        yield registry
    finally:
        hosts.uninstall()
        reporting.said.forget()


@pytest.fixture(autouse=True)
def _forget_what_stayed_out() -> Iterator[None]:
    """A test that makes an adapter fail (test_importhook) must not leave its record to the
    support report of a later test."""
    yield
    patching.this_process.stayed_out.clear()
