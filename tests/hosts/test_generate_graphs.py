"""``inference_graphs`` on each Transformers of the version matrix: taken where the host
can (a fresh ``GenerationConfig``'s defaults are no choice of the user's, though 4.51 gives
each a ``CompileConfig()``), and in lazy mode never a ``generate()`` argument the host lacks
(``cache=`` is 5.x's: 4.x refuses it as an unused model argument)."""

from __future__ import annotations

import pytest
from processes import emulated, run_python

from hpu_plugin.hosts import inference_graphs


def _tiny_llama() -> object:
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
                                        num_hidden_layers=1, num_attention_heads=2,
                                        max_position_embeddings=32)).eval()


def test_a_default_generation_config_is_no_choice_but_a_set_one_is() -> None:
    from transformers.generation.configuration_utils import CompileConfig

    model = _tiny_llama()
    assert not inference_graphs._user_chose(model, {})
    assert inference_graphs._user_chose(model, {"compile_config": CompileConfig()})
    model.generation_config.compile_config = CompileConfig(backend="eager")
    assert inference_graphs._user_chose(model, {})


LAZY = """
    import os
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2,
                                         max_position_embeddings=32, pad_token_id=0))
    model = model.to("hpu").eval()
    ids = torch.tensor([[5, 9, 14, 27, 3]]).to("hpu")
    tokens = []
    for graphs in ("0", "1"):
        os.environ["HPU_PLUGIN_FAST_GRAPHS"] = graphs
        tokens.append(model.generate(ids, max_new_tokens=4, do_sample=False).cpu().tolist())
    print(tokens[0] == tokens[1])
"""


def test_lazy_mode_generate_runs_with_the_same_tokens() -> None:
    import transformers

    if int(transformers.__version__.split(".")[0]) >= 5:  # CI time: covered there by
        pytest.skip("tests/emulation/test_inference_graphs.py (lazy mode, replays counted)")
    env = emulated(PT_HPU_LAZY_MODE="1", TRANSFORMERS_VERBOSITY="error")
    done = run_python(LAZY, env, timeout=300, check=True)
    assert done.stdout.splitlines()[-1] == "True", done.stderr[-3000:]
