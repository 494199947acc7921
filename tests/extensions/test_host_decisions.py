"""On the emulator, installed plugins change what the host libraries decide, and the
switches undo that without uninstalling. The user's scripts never import hpu_plugin."""

from __future__ import annotations

import json

import pytest

from .conftest import clean_environ, run_python, write_plugin

pytestmark = pytest.mark.e2e

COMPILE = """
import torch

def double(x):
    return x * 2

compiled = torch.compile(double)
print(compiled(torch.ones(3, device="hpu")).sum().item())
"""

PLACE = """
import json
import torch
from transformers import BitsAndBytesConfig
from transformers.quantizers.quantizer_bnb_4bit import Bnb4BitHfQuantizer

quantizer = Bnb4BitHfQuantizer(BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4"))
print(json.dumps(quantizer.update_device_map(None)))
"""


def _decisions(path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_compile_policy_changes_the_backend_and_can_be_switched_off(installed_examples,
                                                                    tmp_path):
    log = tmp_path / "decisions.jsonl"
    environ = clean_environ(HPU_PLUGIN_EMULATE="1", HPU_COMPILE_POLICY_LOG=str(log))
    done = run_python(COMPILE, environ)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip().splitlines()[-1] == "6.0"
    assert _decisions(log) == [{
        "hook": "hpu_compile_backend", "requested": None,
        "decided": "hpu_backend", "final": "eager",
    }]
    assert "'eager'" in done.stderr  # the host adapter's one warning names the backend used

    for switch in ({"HPU_PLUGIN_DISABLE": "compile-policy"},
                   {"HPU_PLUGIN_ONLY": "device,compile"},
                   {"HPU_PLUGIN_NO_THIRD_PARTY": "1"}):
        log.unlink(missing_ok=True)
        done = run_python(COMPILE, {**environ, **switch})
        assert done.returncode == 0, done.stderr[-4000:]
        assert done.stdout.strip().splitlines()[-1] == "6.0"
        assert _decisions(log) == [], switch
        assert "'hpu_backend'" in done.stderr and "'eager'" not in done.stderr, switch


@pytest.mark.parametrize("local_rank, expected", [("1", {"": "cpu"}), ("0", {"": "hpu:0"})])
def test_rank_placement_places_quantized_models_per_rank(installed_examples, local_rank,
                                                          expected):
    environ = clean_environ(HPU_PLUGIN_EMULATE="1", HPU_RANK_PLACEMENT="1=cpu",
                            LOCAL_RANK=local_rank)
    done = run_python(PLACE, environ)
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == expected
    off = run_python(PLACE, {**environ, "HPU_PLUGIN_DISABLE": "rank-placement"})
    assert off.returncode == 0, off.stderr[-4000:]
    assert json.loads(off.stdout.strip().splitlines()[-1]) == {"": "hpu:0"}


def test_rank_placement_refuses_a_bad_table_naming_it(installed_examples):
    environ = clean_environ(HPU_PLUGIN_EMULATE="1", HPU_RANK_PLACEMENT="one=cpu")
    done = run_python(PLACE, environ)
    assert done.returncode != 0
    assert "HPU_RANK_PLACEMENT='one=cpu'" in done.stderr and "0=hpu,1=cpu" in done.stderr


HIDER = """
from hpu_plugin.hookspecs import hookimpl

@hookimpl{options}
def hpu_device_available():
    return False
"""

AVAILABLE = """
import torch
import transformers
print(transformers.is_torch_hpu_available())
"""


@pytest.mark.parametrize("options, available", [("", "True"), ("(tryfirst=True)", "False")])
def test_third_party_device_provider_wins_only_when_it_asks(tmp_path, options, available):
    write_plugin(tmp_path, "hider", HIDER.format(options=options), dist="hider", version="1")
    environ = clean_environ(HPU_PLUGIN_EMULATE="1", PYTHONPATH=str(tmp_path))
    done = run_python(AVAILABLE, environ)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip().splitlines()[-1] == available
