"""No Gaudi software and no emulator: the plugin changes nothing."""

from __future__ import annotations

import json

import pytest

from .conftest import base_env, run

SCRIPT = """
import json, sys
import torch
import transformers
from transformers import is_torch_hpu_available
import accelerate
from accelerate.utils import is_hpu_available
print(json.dumps({
    "compile_module": torch.compile.__module__,
    "compile_wrapped": hasattr(torch.compile, "__wrapped__"),
    "torch_module_class": type(torch).__name__,
    "init_pg_module": torch.distributed.init_process_group.__module__,
    "transformers_hpu": is_torch_hpu_available(),
    "accelerate_hpu": is_hpu_available(),
    "meta_path": sorted(type(f).__module__ for f in sys.meta_path),
    "modules": sorted(m for m in sys.modules if m.startswith("hpu_plugin")),
    "env": {k: v for k, v in __import__("os").environ.items() if k.startswith("PT_")},
}))
"""


@pytest.mark.e2e
def test_without_gaudi_the_hosts_behave_as_without_the_plugin(tmp_path):
    env = base_env(tmp_path)
    with_plugin = json.loads(run(SCRIPT, env).stdout)
    without = json.loads(run(SCRIPT, {**env, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}).stdout)
    assert with_plugin["compile_module"] == "torch"
    assert with_plugin["compile_wrapped"] is False
    assert with_plugin["transformers_hpu"] is False
    assert with_plugin["accelerate_hpu"] is False
    # only the package root, whose entry point answers this case; no activation, hosts,
    # registry, plugins, diagnostics or emulator
    assert with_plugin["modules"] == ["hpu_plugin"]
    assert without["modules"] == []
    for key in ("compile_module", "compile_wrapped", "torch_module_class", "init_pg_module",
                "transformers_hpu", "accelerate_hpu", "meta_path", "env"):
        assert with_plugin[key] == without[key], key
