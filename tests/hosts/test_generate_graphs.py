"""``inference_graphs`` on each Transformers of the version matrix: taken where the host
can (a fresh ``GenerationConfig``'s defaults are no choice of the user's, though 4.51 gives
each a ``CompileConfig()``), and in lazy mode HPU graphs replayed with the same tokens, never
with a ``generate()`` argument the host lacks (``cache=`` is 5.x's: 4.x refuses it as an
unused model argument, and keeps its static cache on the model)."""

from __future__ import annotations

import pytest
from processes import emulated, result_of, run_python

from hpu_plugin.fast_paths import inference_graphs


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
    from hpu_emulator import counters
    tokens, replays = [], []
    for graphs in ("0", "1", "1"):  # the second graphed call replays the bucket's graphs
        os.environ["HPU_PLUGIN_FAST_GRAPHS"] = graphs
        counters.reset()
        tokens.append(model.generate(ids, max_new_tokens=4, do_sample=False).cpu().tolist())
        replays.append(counters.snapshot()["graph_replays"])
    print(tokens[0] == tokens[1] == tokens[2], replays[0] == 0 and replays[2] > 0)
"""


def test_lazy_mode_generate_runs_with_the_same_tokens() -> None:
    import transformers

    if int(transformers.__version__.split(".")[0]) >= 5:  # CI time: covered there by
        pytest.skip("tests/emulation/test_inference_graphs.py (lazy mode, replays counted)")
    env = emulated(PT_HPU_LAZY_MODE="1", TRANSFORMERS_VERBOSITY="error")
    done = run_python(LAZY, env, timeout=300, check=True)
    assert done.stdout.splitlines()[-1] == "True True", done.stdout[-3000:] + done.stderr[-3000:]


LOOP = """
    import json, os
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from hpu_emulator import counters
    from hpu_plugin.fast_paths import decoding_loop
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, max_position_embeddings=64,
                                         pad_token_id=0, eos_token_id=None))
    model = model.to("hpu").eval()
    ids = torch.tensor([[0, 0, 5, 9, 14, 27], [4, 8, 15, 16, 23, 42]]).to("hpu")
    def generate(graphs, **kw):
        os.environ["HPU_PLUGIN_FAST_GRAPHS"] = graphs
        counters.reset()
        out = model.generate(ids, attention_mask=(ids != 0).long(), do_sample=False, **kw)
        return out.cpu().tolist(), counters.snapshot()["launches"]
    base = generate("0", max_new_tokens=10)[0]
    runs = {}
    eos = base[0][8]  # the third new token of row 0: that row ends there
    for name, kw in {"plain": {}, "eos": {"eos_token_id": eos},
                     "min_new": {"min_new_tokens": 10, "eos_token_id": eos}}.items():
        off, on = generate("0", max_new_tokens=10, **kw), generate("1", max_new_tokens=10, **kw)
        runs[name] = [off[0] == on[0], off[1], generate("1", max_new_tokens=10, **kw)[1]]
    print("RESULT" + json.dumps({"api": decoding_loop.api(), "runs": runs}))
"""


def test_the_fixed_shape_loop_where_the_host_takes_one_gives_transformers_tokens() -> None:
    """4.57 and 5.x take a decoding loop as a callable (two APIs: ``past_key_values`` with a
    ``cache_position`` from the loop, ``cache=``); 4.51 takes none and keeps its own loop."""
    import transformers

    major, minor = (int(n) for n in transformers.__version__.split(".")[:2])
    expected = None if (major, minor) < (4, 57) else ("4" if major == 4 else "5")
    env = emulated(TRANSFORMERS_VERBOSITY="error")
    done = run_python(LOOP, env, timeout=300, check=True)
    result = result_of(done.stdout)
    assert result["api"] == expected
    for name, (same, off, on) in result["runs"].items():
        assert same, (name, result)  # greedy tokens identical, also a row ended early
        if expected is not None and name != "eos":  # ten tokens; the eos run ends after 3
            assert on < 0.25 * off, (name, result)  # a token: one graph run


def test_the_decoding_loop_gate_on_each_entry_of_the_version_matrix() -> None:
    """By the Transformers version alone: the oldest entry (4.51) and Gaudi 1.23's and 1.24.0's
    (4.55) take
    no loop as a callable, the middle one (4.57) speaks 4.x's API, the newest and Gaudi
    1.24.1's 5.x's; a release outside the span of the tested ones, or unreadable, gets no
    loop."""
    from hpu_plugin.fast_paths.decoding_loop import loop_api
    from hpu_plugin.hosts.support import MATRIX

    expected = {
        "gaudi-1.23": None, "gaudi-1.24.0": None, "gaudi-1.24.1": "5", "oldest": None,
        "middle": "4", "newest": "5",
    }
    assert {entry.name: loop_api(entry.transformers) for entry in MATRIX} == expected
    assert [loop_api(v) for v in ("4.56.2", "4.57.0.dev0", "6.0.0", "not-a-version")] == [
        None, None, None, None]


def test_the_installed_transformers_has_what_its_gate_promises() -> None:
    """The gate stands for what was read from the host: where it says a loop is taken,
    ``generate()`` takes a callable (its own check of ``custom_generate``) and has every
    method the loop stands in for."""
    import inspect

    import transformers
    from transformers.generation.utils import GenerationMixin

    from hpu_plugin.fast_paths import decoding_loop

    gate = decoding_loop.loop_api(transformers.__version__)
    takes_callable = "isinstance(custom_generate, Callable)" in inspect.getsource(
        inspect.unwrap(GenerationMixin.generate))
    assert takes_callable == (gate is not None)
    assert decoding_loop.api() == gate


AFTER_GRAPHS = """
    import io, json, os, pickle, sys
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2,
                                         max_position_embeddings=32, pad_token_id=0)).eval()
    ids = torch.tensor([[5, 9, 14, 27, 3]])

    def contrastive(m, device):
        try:
            return m.generate(ids.to(device), penalty_alpha=0.6, top_k=4,
                              max_new_tokens=4).cpu().tolist()
        except ValueError as exc:  # Transformers 5 moved contrastive search to the Hub
            return str(exc)[:80]

    cpu = contrastive(model, "cpu")
    model = model.to("hpu")
    greedy = model.generate(ids.to("hpu"), max_new_tokens=4, do_sample=False).cpu().tolist()
    on_hpu = contrastive(model, "hpu")
    pickle.loads(pickle.dumps(model))
    saved = io.BytesIO()
    torch.save(model.cpu(), saved)
    print("RESULT" + json.dumps({"contrastive": [cpu, on_hpu], "greedy": greedy,
                                 "saved_on_cpu": all(t.device.type == "cpu" for t in
                                     torch.load(io.BytesIO(saved.getvalue()),
                                                weights_only=False).state_dict().values())}))
"""


def test_after_a_graphed_generate_contrastive_search_runs_and_the_model_saves() -> None:
    """Transformers 4.x keeps its compiled decoding call and static cache on the model:
    both stay out of the pickled state, so the model pickles and saves with no device
    tensor; and contrastive search, whose 4.x loop crops a cache a static one cannot be,
    runs as Transformers wrote it (its tokens the CPU's)."""
    env = emulated(TRANSFORMERS_VERBOSITY="error")
    done = run_python(AFTER_GRAPHS, env, timeout=300, check=True)
    result = result_of(done.stdout)
    cpu, on_hpu = result["contrastive"]
    assert on_hpu == cpu, result
    assert result["saved_on_cpu"] is True and len(result["greedy"][0]) == 9, result


DEFAULT_LENGTH = """
    import copy, json, logging
    import torch
    logging.getLogger("hpu_plugin").setLevel(logging.INFO)
    logging.getLogger("hpu_plugin").addHandler(logging.StreamHandler())
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cpu = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                       num_hidden_layers=1, num_attention_heads=4,
                                       num_key_value_heads=2, max_position_embeddings=64,
                                       eos_token_id=None)).eval()
    hpu = copy.deepcopy(cpu).to("hpu")
    ids = torch.tensor([[7, 8, 9, 10, 11, 12]])
    runs = {}
    for name, kw in {"none": {}, "max_length": {"max_length": 20}}.items():
        runs[name] = [m.generate(i, attention_mask=torch.ones_like(i), do_sample=False,
                                 **kw).cpu().tolist()
                      for m, i in ((cpu, ids), (hpu, ids.to("hpu")))]
    print("RESULT" + json.dumps(runs))
"""


def test_a_call_with_no_length_generates_transformers_default_number_of_tokens() -> None:
    """No ``max_new_tokens`` nor ``max_length``: 20 new tokens on every Transformers of the
    matrix (4.x's config says ``max_length=20`` and means new tokens), as on the CPU; a
    ``max_length`` the caller passes counts the prompt."""
    env = emulated(TRANSFORMERS_VERBOSITY="error")
    done = run_python(DEFAULT_LENGTH, env, timeout=300, check=True)
    runs = result_of(done.stdout)
    (cpu, hpu), (cpu_total, hpu_total) = runs["none"], runs["max_length"]
    said = "generate() of LlamaForCausalLM runs without graphs: the number of new tokens"
    assert done.stderr.count(said) == 1, done.stderr[-3000:]
    assert hpu == cpu and len(cpu[0]) == 6 + 20
    assert hpu_total == cpu_total and len(cpu_total[0]) == 20
