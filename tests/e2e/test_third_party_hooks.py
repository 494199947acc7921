"""A separately installed plugin overrides every hook, and the hosts obey it (R17, R18)."""

from __future__ import annotations

import pytest

from .conftest import emulated_env, run

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("emulator")]

SCRIPT = """
import torch
import torch.distributed as dist
import transformers
from transformers import TrainingArguments, is_torch_hpu_available, pipeline
from accelerate.utils import is_hpu_available

print("transformers_hpu=", is_torch_hpu_available())
print("accelerate_hpu=", is_hpu_available())
if is_torch_hpu_available():
    args = TrainingArguments(output_dir=OUT, torch_compile=True, report_to=[])
    print("compile_backend=", args.torch_compile_backend)
    torch.compile(lambda t: t + 1)(torch.ones(2, device="hpu"))
    dist.init_process_group(init_method=STORE, rank=0, world_size=1)
    print("ddp_backend=", dist.get_backend())
    dist.destroy_process_group()
    from transformers.quantizers.quantizer_bnb_8bit import Bnb8BitHfQuantizer
    print("bnb=", object.__new__(Bnb8BitHfQuantizer).update_device_map(None))
    try:
        print("pipeline=", pipeline("text-generation", model=MODEL).device)
    except RuntimeError as exc:  # a process drives one device only, index 0, as on Gaudi
        print("pipeline=", "refused:", str(exc).splitlines()[0])
"""


def _script(tmp_path, tiny_model) -> str:
    return (f"OUT = {str(tmp_path / 'out')!r}\nSTORE = 'file://{tmp_path / 'store'}'\n"
            f"MODEL = {str(tiny_model)!r}\n" + SCRIPT)


def test_every_hook_of_a_third_party_plugin_is_obeyed(tmp_path, tiny_model, override_plugin):
    env = emulated_env(tmp_path, devices=2, HPU_TEST_OVERRIDE="1")
    result = run(_script(tmp_path, tiny_model), env)
    out = result.lines()
    assert out["transformers_hpu"] == "True"
    assert out["compile_backend"] == "eager"  # not hpu_backend: the plugin chose
    assert out["ddp_backend"] == "gloo"  # not hccl
    assert out["bnb"] == "{'': 'cpu'}"  # not hpu:<current>
    # The pipeline goes to the plugin's current device, index 1, not to index 0; the
    # emulator then refuses it as Gaudi does (one device per process).
    assert out["pipeline"] == "hpu:1" or "active device: 1 != 0" in out["pipeline"], out
    assert "'eager'" in result.stderr  # the switch to the plugin's backend is reported


def test_a_plugin_can_hide_gaudi_from_the_hosts(tmp_path, tiny_model, override_plugin):
    env = emulated_env(tmp_path, HPU_TEST_OVERRIDE="1", HPU_TEST_OVERRIDE_HIDE="1")
    out = run(_script(tmp_path, tiny_model), env).lines()
    assert out["transformers_hpu"] == "False"
    assert out["accelerate_hpu"] == "False"


def test_a_disabled_plugin_is_not_asked(tmp_path, tiny_model, override_plugin):
    env = emulated_env(tmp_path, devices=2, HPU_TEST_OVERRIDE="1",
                       HPU_PLUGIN_DISABLE=override_plugin)
    out = run(_script(tmp_path, tiny_model), env).lines()
    assert out["compile_backend"] == "hpu_backend"
    assert out["ddp_backend"] == "hccl"
    assert out["bnb"] == "{'': 'hpu:0'}"


def test_transformers_own_compile_wrapper_does_not_preempt_the_hook(tmp_path, override_plugin):
    """Transformers >= 4.55 swaps torch.compile inside its HPU check; the hook still decides."""
    env = emulated_env(tmp_path, HPU_TEST_OVERRIDE="1")
    result = run(
        """
        import transformers.utils.import_utils as import_utils
        kept = [import_utils.is_torch_hpu_available]  # Transformers' own check, held as is
        import torch
        print("native=", kept[0]())  # runs its whole body, torch.compile swap included
        compiled = torch.compile(lambda t: t * 2)
        doubled = compiled(torch.ones(2, device="hpu")).cpu()
        print("ok=", torch.equal(doubled, torch.full((2,), 2.0)))
        """,
        env,
    )
    assert result.lines()["native"] == "True"
    assert result.lines()["ok"] == "True"
    assert "using 'eager'" in result.stderr  # the third-party hook's backend, reported once
