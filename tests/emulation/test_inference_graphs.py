"""Eager ``generate()`` and ``pipeline()`` decoded by graphs (the ``inference_graphs`` fast
path) on the emulated Gaudi: the same greedy tokens as without, far fewer launches, and the
user's own choices (compilation, cache, training mode) and the graph budget respected."""

from __future__ import annotations

import pytest
from processes import result_of

SCRIPT = r"""
import json, logging, os
import torch
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,
                          MistralConfig, MistralForCausalLM, PreTrainedTokenizerFast,
                          Qwen2Config, Qwen2ForCausalLM, pipeline)
from transformers.generation.configuration_utils import CompileConfig
from tokenizers import Tokenizer, models, pre_tokenizers
from hpu_emulator import counters

SIZES = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
             pad_token_id=0, bos_token_id=1, eos_token_id=2)
MODELS = {
    "llama": lambda: LlamaForCausalLM(LlamaConfig(**SIZES)),
    "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(**SIZES)),
    "gpt2": lambda: GPT2LMHeadModel(GPT2Config(vocab_size=96, n_embd=32, n_layer=2, n_head=4,
                                               n_positions=64, pad_token_id=0, eos_token_id=2)),
}
IDS = torch.tensor([[0, 0, 0, 5, 9, 14, 27], [4, 8, 15, 16, 23, 42, 7]])

def generate(model, graphs, **kw):
    os.environ["HPU_PLUGIN_FAST_GRAPHS"] = graphs
    ids = IDS.to("hpu")
    counters.reset()
    kw = {"max_new_tokens": 8, **kw}
    out = model.generate(input_ids=ids, attention_mask=(ids != 0).long(), do_sample=False,
                         **kw)
    return out.cpu().tolist(), counters.snapshot()

result = {}
for name, make in MODELS.items():
    torch.manual_seed(0)
    model = make().to("hpu").eval()
    off, off_counts = generate(model, "0")
    on, on_counts = generate(model, "1")
    result[name] = {"same": on == off, "off": off_counts, "on": on_counts}

# the pipeline of a model in eval mode (what pipeline() makes of it)
vocab = {f"w{i}": i for i in range(96)}
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="w3"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="w0", eos_token="w2",
                                    bos_token="w1", unk_token="w3")
torch.manual_seed(0)
# built from a config, so in training mode until eval() (from_pretrained gives eval mode)
gen = pipeline("text-generation", model=MODELS["llama"]().to("hpu").eval(), tokenizer=tokenizer)
text = " ".join(f"w{4 + (j * 7) % 90}" for j in range(9))
texts = {}
for graphs in ("0", "1"):
    os.environ["HPU_PLUGIN_FAST_GRAPHS"] = graphs
    counters.reset()
    texts[graphs] = gen(text, max_new_tokens=6, do_sample=False)[0]["generated_text"]
    texts[graphs + "_graphs"] = counters.snapshot()["compiled_graphs"]
result["pipeline"] = texts

# never taken: a model in training mode, the user's compile_config or disable_compile
torch.manual_seed(0)
model = MODELS["llama"]().to("hpu")
_, train_mode = generate(model.train(), "1")
model.eval()
_, disabled = generate(model, "1", disable_compile=True)
mine = CompileConfig(backend="eager")
mine._compile_all_devices = True
_, user_config = generate(model, "1", compile_config=mine, cache_implementation="static")
_, config_only = generate(model, "1", compile_config=mine)
model.generation_config.compile_config = mine
_, model_config = generate(model, "1")
# sliding layers: Transformers' static sliding cache branches on a Python int (a compile per
# token; an HPU graph would replay its capture's branch)
torch.manual_seed(0)
mistral = MistralForCausalLM(MistralConfig(sliding_window=6, **SIZES)).to("hpu").eval()
sliding_off, _ = generate(mistral, "0")
sliding_on, sliding = generate(mistral, "1")
result["not_taken"] = {"train": train_mode["compiled_graphs"],
                       "disable_compile": disabled["compiled_graphs"],
                       "user_config": user_config["compiled_graphs"],
                       "config_only": config_only["compiled_graphs"],
                       "model_config": model_config["compiled_graphs"],
                       "sliding": sliding["compiled_graphs"],
                       "sliding_same": sliding_on == sliding_off}

# Transformers 5's loop given as a callable (fast_paths/decoding_loop.py): a row that ends early,
# and a logits processor the loop does not compute (Transformers' own loop runs then)
torch.manual_seed(0)
model = MODELS["llama"]().to("hpu").eval()
base, _ = generate(model, "0", max_new_tokens=12)
eos = base[0][IDS.shape[1] + 3]
from torch._dynamo.utils import counters as dynamo_counters
graphs_before = dynamo_counters["stats"]["unique_graphs"]
ended = {g: generate(model, g, max_new_tokens=12, eos_token_id=eos) for g in ("0", "1")}
graphs_made = dynamo_counters["stats"]["unique_graphs"] - graphs_before
suppressed = {g: generate(model, g, suppress_tokens=[base[0][IDS.shape[1]]]) for g in "01"}
# arguments Transformers gives only its own loops, and a mode it moved to the Hub
stopped = {g: generate(model, g, max_new_tokens=12, tokenizer=tokenizer) for g in "01"}
def contrastive(graphs):
    try:
        return generate(model, graphs, penalty_alpha=0.6, top_k=4)
    except ValueError as exc:
        return str(exc)
moved = {g: contrastive(g) for g in "01"}
result["loop"] = {"ended_same": ended["0"][0] == ended["1"][0],
                  "stopped_same": stopped["0"][0] == stopped["1"][0] == base,
                  # Transformers' loop (the callable would lose the tokenizer): its launches
                  "stopped_loop": stopped["1"][1]["launches"] > 2 * ended["1"][1]["launches"],
                  "moved_same": moved["0"] == moved["1"] and "trust_remote_code" in moved["1"],
                  "ended_row": ended["1"][0][0][IDS.shape[1] + 3:],
                  "ended_launches": [ended[g][1]["launches"] for g in "01"],
                  "suppressed_same": suppressed["0"][0] == suppressed["1"][0],
                  "suppressed_graphs": suppressed["1"][1]["compiled_graphs"],
                  "graphs_made": graphs_made}

# models and calls left to Transformers (same tokens, no error): a forward without position
# ids (BLOOM), LongRoPE (frequencies chosen by the longest position: a graph would keep its
# first step's), Falcon's alibi (no static cache in Transformers), a stopping criterion of the
# user's (it reads input_ids, which bucket padding would lengthen)
from transformers import (BloomConfig, BloomForCausalLM, FalconConfig, FalconForCausalLM,
                          Phi3Config, Phi3ForCausalLM, StoppingCriteria, StoppingCriteriaList)
class AtLength(StoppingCriteria):
    def __call__(self, input_ids, scores, **kwargs):
        done = input_ids.shape[1] >= IDS.shape[1] + 3
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)
ROPE = {"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [3.0] * 4,
        "rope_theta": 10000.0, "original_max_position_embeddings": 8}
OTHERS = {
    "bloom": lambda: BloomForCausalLM(BloomConfig(vocab_size=96, hidden_size=32, n_layer=2,
                                                  n_head=4, pad_token_id=0, eos_token_id=2)),
    "longrope": lambda: Phi3ForCausalLM(Phi3Config(original_max_position_embeddings=8,
                                                   rope_parameters=ROPE, **SIZES)),
    "alibi": lambda: FalconForCausalLM(FalconConfig(
        vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, alibi=True,
        new_decoder_architecture=False, pad_token_id=0, eos_token_id=2)),
}
others = {}
for name, make in OTHERS.items():
    torch.manual_seed(0)
    other = make().to("hpu").eval()
    runs = [generate(other, g) for g in "01"]
    others[name] = runs[0][0] == runs[1][0]
criteria = [generate(model, g, stopping_criteria=StoppingCriteriaList([AtLength()])) for g in "01"]
# a prepare_inputs_for_generation set on the model itself (as PEFT's prompt learning does),
# and PEFT's prompt tuning: Transformers' loop and cache as the user set them up
torch.manual_seed(0)
remapped = MODELS["llama"]().to("hpu").eval()
def remap(input_ids, **kwargs):
    inputs = type(remapped).prepare_inputs_for_generation(remapped, input_ids, **kwargs)
    inputs["input_ids"] = inputs["input_ids"] * 7 % 90 + 3
    return inputs
remapped.prepare_inputs_for_generation = remap
runs = [generate(remapped, g) for g in "01"]
others["instance"] = runs[0][0] == runs[1][0]
from peft import PromptTuningConfig, get_peft_model
torch.manual_seed(0)
prompted = get_peft_model(MODELS["llama"](), PromptTuningConfig(
    task_type="CAUSAL_LM", num_virtual_tokens=4)).to("hpu").eval()
runs = [generate(prompted, g) for g in "01"]
others["prompt_tuning"] = runs[0][0] == runs[1][0]
others["criteria"] = criteria[0][0] == criteria[1][0] and len(criteria[1][0][0]) == IDS.shape[1] + 3
result["others"] = others

# a graph that fails to compile: a warning, the model refused, the ordinary generate's tokens
from torch._dynamo.backends import registry
def failing(gm, example_inputs, **options):
    raise RuntimeError("no recipe for this graph")
backend = registry._COMPILER_FNS["hpu_backend"]
registry._COMPILER_FNS["hpu_backend"] = failing
torch.manual_seed(0)
model = MODELS["llama"]().to("hpu").eval()
plain, _ = generate(model, "0")
failed, failed_counts = generate(model, "1")
try:  # the user's own bad argument still reaches the user
    generate(model, "1", max_new_tokens=-1)
    user_error = None
except ValueError as exc:
    user_error = type(exc).__name__
result["failed"] = {"same": failed == plain, "graphs": failed_counts["compiled_graphs"],
                    "user_error": user_error}
registry._COMPILER_FNS["hpu_backend"] = backend

# the budget: one bucket per model; a second bucket runs eagerly, with a warning: another
# batch (4), or the same batch and cache with another padded prompt length (here 60 instead
# of 56: the 64 positions less the new tokens), whose prefill would be a graph of its own
os.environ["HPU_PLUGIN_GRAPHS_MAX"] = "1"
torch.manual_seed(0)
model = MODELS["llama"]().to("hpu").eval()
_, first = generate(model, "1")
_, longer = generate(model, "1", max_new_tokens=4)
IDS = torch.cat([IDS, IDS + 1, IDS + 2])
_, second = generate(model, "1")
result["budget"] = [first["compiled_graphs"], longer["compiled_graphs"],
                    second["compiled_graphs"]]
os.environ["HPU_PLUGIN_GRAPHS_MAX"] = "many"
try:
    generate(model, "1")
    result["bad_budget"] = None
except ValueError as exc:
    result["bad_budget"] = str(exc)
print("RESULT" + json.dumps(result))
"""


@pytest.mark.e2e
def test_eager_generate_decodes_by_graphs_with_the_same_tokens(run):
    proc = run(SCRIPT, {"TRANSFORMERS_VERBOSITY": "error"}, timeout=1500)
    result = result_of(proc.stdout)
    print({k: (v["on"]["launches"], v["off"]["launches"]) for k, v in result.items()
           if "on" in v})
    import transformers

    from hpu_plugin.fast_paths import decoding_loop

    # Transformers 4.57 and 5 take the fixed-shape loop: the prefill is a graph too
    loop_taken = decoding_loop.loop_api(transformers.__version__) is not None
    for name in ("llama", "qwen2", "gpt2"):
        r = result[name]
        assert r["same"], name
        assert r["off"]["compiled_graphs"] == 0, name
        # the 7 decoding steps after the prefill: one graph run each (and the prefill)
        assert r["on"]["compiled_graphs"] == 7 + loop_taken, (name, r["on"])
        # elsewhere the prefill and Transformers' loop around each step stay eager
        assert r["on"]["launches"] < 0.7 * r["off"]["launches"], (name, r)
    if loop_taken:
        # the fixed-shape loop: the prefill one graph run, each token one more; what is left
        # is generate()'s own preparation (its checks of the special tokens, the position
        # ids) and the padding to the buckets
        for name in ("llama", "qwen2", "gpt2"):
            assert result[name]["on"]["launches"] < 0.1 * result[name]["off"]["launches"]
    if int(transformers.__version__.split(".")[0]) >= 5:
        loop = result["loop"]
        assert loop["ended_same"] and loop["suppressed_same"], loop
        assert loop["stopped_same"] and loop["stopped_loop"] and loop["moved_same"], loop
        assert loop["ended_row"][0] != 0 and set(loop["ended_row"][1:]) == {0}, loop
        assert loop["ended_launches"][1] < 0.25 * loop["ended_launches"][0], loop
        # one graph for the bucket's prefill, one for its steps (the first step's too)
        assert loop["graphs_made"] == 2, loop
        assert loop["suppressed_graphs"] == 7, loop  # Transformers' loop, its compiled steps
    pipe = result["pipeline"]
    assert pipe["1"] == pipe["0"] and pipe["0_graphs"] == 0, pipe
    assert pipe["1_graphs"] == 5 + loop_taken, pipe
    assert result["not_taken"] == {"train": 0, "disable_compile": 0, "user_config": 0,
                                   "config_only": 0, "model_config": 0, "sliding": 0,
                                   "sliding_same": True}, result["not_taken"]
    assert result["others"] == {"bloom": True, "longrope": True, "alibi": True,
                                "criteria": True, "instance": True,
                                "prompt_tuning": True}, result["others"]
    assert result["failed"] == {"same": True, "graphs": 0, "user_error": "ValueError"}, result
    assert "compiling the decoding steps of LlamaForCausalLM" in proc.stderr, proc.stderr[-3000:]
    assert result["budget"] == [7 + loop_taken, 0, 0], result["budget"]
    assert "HPU_PLUGIN_GRAPHS_MAX" in result["bad_budget"], result["bad_budget"]
    assert "Raise HPU_PLUGIN_GRAPHS_MAX (now 1)" in proc.stderr, proc.stderr[-3000:]


#: A tiny Llama on hpu in eval mode, and a prompt with left padding: the lazy-mode scripts'.
LAZY_LLAMA = r"""
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from hpu_emulator import counters

torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64,
                                     num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, max_position_embeddings=64,
                                     pad_token_id=0, eos_token_id=2)).to("hpu").eval()
ids = torch.tensor([[0, 0, 5, 9, 14, 27, 33]]).to("hpu")
"""

LAZY = LAZY_LLAMA + r"""
import os
def generate(graphs):
    os.environ["HPU_PLUGIN_FAST_GRAPHS"] = graphs
    counters.reset()
    out = model.generate(ids, attention_mask=(ids != 0).long(), max_new_tokens=6,
                         do_sample=False)
    return out.cpu().tolist(), counters.snapshot()["graph_replays"]
off = generate("0")
runs = [generate("1") for _ in range(3)]
# concurrent calls on one model: one at a time uses the kept cache and graphs, the others
# run without; every one gets the same tokens
import threading
together = []
threads = [threading.Thread(target=lambda: together.append(
    model.generate(ids, attention_mask=(ids != 0).long(), max_new_tokens=6,
                   do_sample=False).cpu().tolist())) for _ in range(3)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("RESULT", [tokens == off[0] for tokens, _ in runs], [n for _, n in runs], off[1],
      "forward" in vars(model), together == [off[0]] * 3)
"""


@pytest.mark.e2e
def test_lazy_mode_replays_hpu_graphs_with_the_same_tokens(run):
    out = run(LAZY, {"TRANSFORMERS_VERBOSITY": "error", "PT_HPU_LAZY_MODE": "1"}).stdout
    line = next(line for line in out.splitlines() if line.startswith("RESULT"))
    # every call the same tokens; from the second call on, the prefill and the 5 decoding
    # steps replay the bucket's graphs (one cache kept per bucket); the forward is the class's
    assert line == "RESULT [True, True, True] [4, 6, 6] 0 False True", line


LAZY_MODEL_STAYS_THE_USERS = LAZY_LLAMA + r"""
import copy, io, json, os, pickle
def generate(m):
    counters.reset()
    out = m.generate(ids, attention_mask=(ids != 0).long(), max_new_tokens=6, do_sample=False)
    return out.cpu().tolist(), counters.snapshot()["graph_replays"]
first, second = generate(model), generate(model)  # the second replays the kept graphs
twin = copy.deepcopy(model)
pickle.loads(pickle.dumps(model))
torch.save(model, io.BytesIO())
seen = []
handle = model.lm_head.register_forward_hook(lambda module, args, out: seen.append(1))
hooked = generate(model)
handle.remove()
print("RESULT" + json.dumps({"replays": [second[1], hooked[1]], "hook_calls": len(seen),
                             "same": [second[0] == first[0], hooked[0] == first[0],
                                      generate(twin)[0] == first[0]]}))
"""


@pytest.mark.e2e
def test_lazy_mode_graphs_leave_the_model_copyable_and_its_hooks_running(run):
    """The kept graphs, caches and lock are held beside the model: after graphed calls it
    deep-copies, pickles and saves as before; a forward hook the user registers on
    ``lm_head`` runs at every step (the model is not graphed while a hook is in place)."""
    out = run(LAZY_MODEL_STAYS_THE_USERS,
              {"TRANSFORMERS_VERBOSITY": "error", "PT_HPU_LAZY_MODE": "1"}).stdout
    result = result_of(out)
    assert result["same"] == [True, True, True], result
    assert result["replays"][0] > 0 and result["replays"][1] == 0, result
    assert result["hook_calls"] == 6, result  # one forward a new token, the prefill's first


#: Lazy mode, where Transformers numbers the positions from the attention mask (GPT-2's
#: absolute positions: it passes ``position_ids`` only to a forward that takes them) and
#: where it prefills in chunks (``prefill_chunk_size``), each with graphs and without.
LAZY_POSITIONS = LAZY_LLAMA + r"""
import json, os
from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=96, n_embd=32, n_layer=2, n_head=4,
                                  n_positions=64, pad_token_id=0, eos_token_id=2)).to("hpu").eval()
rows = torch.tensor([[0, 0, 0, 0, 0, 0, 5, 9, 14, 27, 33],
                     [4, 8, 15, 16, 23, 42, 7, 3, 11, 60, 21]]).to("hpu")
long = torch.tensor([[3 + (i * 7) % 90 for i in range(40)]]).to("hpu")
def generate(graphs):
    os.environ["HPU_PLUGIN_FAST_GRAPHS"] = graphs
    return [gpt2.generate(rows, attention_mask=(rows != 0).long(), max_new_tokens=8,
                          do_sample=False).cpu().tolist(),
            model.generate(long, generation_config=GenerationConfig(
                max_new_tokens=6, do_sample=False, pad_token_id=0,
                prefill_chunk_size=16)).cpu().tolist()]
off = generate("0")
on = [generate("1") for _ in range(2)]
print("RESULT" + json.dumps({"gpt2": [run[0] == off[0] for run in on],
                             "chunked": [run[1] == off[1] for run in on]}))
"""


@pytest.mark.e2e
def test_lazy_mode_graphs_keep_positions_numbered_from_the_mask(run):
    out = run(LAZY_POSITIONS, {"TRANSFORMERS_VERBOSITY": "error", "PT_HPU_LAZY_MODE": "1"})
    assert result_of(out.stdout) == {"gpt2": [True, True], "chunked": [True, True]}, (
        out.stdout[-2000:])


#: Eager mode, a prefill in chunks the caller asked for (``prefill_chunk_size``).
CHUNKED = LAZY_LLAMA + r"""
import json, os
from transformers import GenerationConfig
long = torch.tensor([[3 + (i * 7) % 90 for i in range(40)]]).to("hpu")
def generate(graphs):
    os.environ["HPU_PLUGIN_FAST_GRAPHS"] = graphs
    return model.generate(long, generation_config=GenerationConfig(
        max_new_tokens=6, do_sample=False, pad_token_id=0, prefill_chunk_size=16)).cpu().tolist()
off = generate("0")
print("RESULT" + json.dumps([generate("1") == off for _ in range(2)]))
"""


@pytest.mark.e2e
def test_a_chunked_prefill_keeps_transformers_loop_without_a_graph_break(run):
    done = run(CHUNKED, {"TRANSFORMERS_VERBOSITY": "error"})
    assert result_of(done.stdout) == [True, True], done.stdout[-2000:]
    # the plugin's loop, compiled, would trace Transformers' chunked prefill, which sets an
    # environment variable: Dynamo warns and breaks the graph there
    assert "putenv" not in done.stderr, done.stderr[-3000:]
