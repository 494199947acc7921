"""Mixture-of-experts models on ``hpu`` with unchanged code: a model that names no
``experts_implementation`` gets ``batched_mm`` from the Transformers adapter and gives the
CPU's greedy tokens and AdamW losses (tiny Mixtral, Qwen3-MoE, GPT-OSS on the emulated
Gaudi). ``grouped_mm`` and the router's auxiliary loss without a mask count tokens with
``torch.histc`` on int32, for which the bridge has no HPU kernel (its CPU fallback refuses
integers): the plugin's HPU kernel counts them, so a model that names ``grouped_mm`` keeps it
and runs, and the auxiliary loss is the CPU's; without the adapters the default model fails.
The ``fused_moe`` fast path is off here (``HPU_PLUGIN_FAST_MOE=0``): this is the adapter's own
choice; ``test_fused_moe`` covers the fused kernel that takes its place where it fits."""

from __future__ import annotations

import pytest
from processes import emulated, result_of, run_python

from .moe_models import PRELUDE

#: Transformers 4 has no experts interface (its MoE layers loop over their experts in Python):
#: nothing chooses an implementation there, so there is nothing to adapt.
EXPERTS_INTERFACE = int(pytest.importorskip("transformers").__version__.split(".")[0]) >= 5
needs_experts_interface = pytest.mark.skipif(
    not EXPERTS_INTERFACE, reason="Transformers 4 has no experts interface")

SCRIPT = PRELUDE + r"""
from hpu_plugin import hosts

def failure(name, **kw):
    try:
        model = made(name, "hpu", **kw)
        model(input_ids=IDS.to("hpu"))
    except Exception as exc:
        return [model.config._experts_implementation, f"{type(exc).__name__}: {exc}"]
    return [model.config._experts_implementation, None]

result = {}
for name in MODELS:
    # The CPU's own default is grouped_mm (float histc on CPU); named here because in this
    # process, with Gaudi present, an unnamed model gets batched_mm on every device.
    cpu = made(name, "cpu", experts_implementation="grouped_mm")
    hpu = made(name, "hpu")
    result[name] = {
        "chosen": hpu.config._experts_implementation,
        "cpu_tokens": generate(cpu, "cpu"), "hpu_tokens": generate(hpu, "hpu"),
        "cpu_losses": train(made(name, "cpu", experts_implementation="grouped_mm"), "cpu"),
        "hpu_losses": train(made(name, "hpu"), "hpu"),
        "named": failure(name, experts_implementation="grouped_mm"),
        # the router's auxiliary loss without an attention mask counts tokens with histc
        "aux": [[float(getattr(out, key)) for key in ("aux_loss", "loss")] for out in (
            made(name, device, experts_implementation="grouped_mm")(
                input_ids=ROWS.to(device), labels=ROWS.to(device), output_router_logits=True)
            for device in ("cpu", "hpu"))],
    }
hosts.uninstall()
result["without"] = failure("mixtral")
print("RESULT" + json.dumps(result))
"""

NAMES = ("mixtral", "qwen3_moe", "gpt_oss")


@pytest.fixture(scope="module")
def moe() -> dict:
    if not EXPERTS_INTERFACE:
        pytest.skip("Transformers 4 has no experts interface")
    env = emulated(HF_HUB_OFFLINE="1", HPU_PLUGIN_FAST_MOE="0")
    done = run_python(SCRIPT, env, timeout=300, check=True)
    return result_of(done.stdout)


@pytest.mark.parametrize("name", NAMES)
def test_unnamed_experts_get_batched_mm_on_gaudi(moe, name):
    assert moe[name]["chosen"] == "batched_mm"


@pytest.mark.parametrize("name", NAMES)
def test_greedy_tokens_are_the_cpus(moe, name):
    assert moe[name]["hpu_tokens"] == moe[name]["cpu_tokens"]
    assert len(moe[name]["hpu_tokens"][0]) == 15  # 7 prompt tokens and 8 new ones


@pytest.mark.parametrize("name", NAMES)
def test_adamw_losses_are_the_cpus(moe, name):
    cpu, hpu = moe[name]["cpu_losses"], moe[name]["hpu_losses"]
    assert hpu == pytest.approx(cpu, rel=1e-4, abs=1e-5)
    assert cpu[-1] < cpu[0]  # the steps trained something


@pytest.mark.parametrize("name", NAMES)
def test_a_named_grouped_mm_is_kept_and_runs(moe, name):
    # its integer histc runs by the plugin's HPU kernel, aten::_grouped_mm by the bridge's
    # CPU fallback, as every op without an HPU kernel
    chosen, error = moe[name]["named"]
    assert chosen == "grouped_mm" and error is None, error


@pytest.mark.parametrize("name", NAMES)
def test_the_router_loss_without_a_mask_is_the_cpus(moe, name):
    # Transformers counts each expert's tokens with torch.histc on int32 off the CPU; the
    # bridge's CPU fallback refuses integers, and the plugin's HPU kernel counts in float32
    cpu, hpu = moe[name]["aux"]
    assert hpu == pytest.approx(cpu, rel=1e-5), (cpu, hpu)
    assert cpu[0] > 0


def test_without_the_adapter_the_default_fails(moe):
    chosen, error = moe["without"]
    assert chosen == "grouped_mm"
    assert error is not None and "histogram_cpu" in error


# -- the choice itself, in this process: real Transformers, a test plugin's "Gaudi ready" ------


def _mixtral(**named: str):
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
                           num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                           num_local_experts=2, num_experts_per_tok=1, **named)
    return MixtralForCausalLM(config)


@needs_experts_interface
def test_the_choice_is_gaudis_default_only_and_keeps_what_the_user_named(installed):
    from hpu_plugin import hosts

    assert _mixtral().config._experts_implementation == "batched_mm"
    for named in ("grouped_mm", "eager", "batched_mm"):
        assert _mixtral(experts_implementation=named).config._experts_implementation == named
    model = _mixtral()
    model.set_experts_implementation("grouped_mm")  # a later explicit choice is kept too
    assert model.config._experts_implementation == "grouped_mm"
    hosts.uninstall()
    assert _mixtral().config._experts_implementation == "grouped_mm"


def test_a_transformers_without_the_method_is_named_as_stayed_out(installed):
    import types

    from hpu_plugin import patching
    from hpu_plugin.hosts import transformers_adapter

    class Model:
        pass

    # An experts interface but no get_correct_experts_implementation: a release this was not
    # written for; the adapter says so and patches nothing.
    made = patching.Patches()
    fake = types.SimpleNamespace(ALL_EXPERTS_FUNCTIONS={}, PreTrainedModel=Model)
    transformers_adapter.install_experts(installed, made, fake)
    reason = patching.this_process.stayed_out["transformers experts"]
    assert "get_correct_experts_implementation" in reason
    assert made.made == []
    # Transformers 4.x: no experts interface (its MoE layers loop over experts), nothing to say.
    patching.this_process.stayed_out.clear()
    transformers_adapter.install_experts(installed, made, types.SimpleNamespace())
    assert patching.this_process.stayed_out == {}
