"""Gaudi fp8 for unchanged Transformers code, on the emulated Gaudi 2 and 3.

A tiny ``LlamaForCausalLM`` is built from a config, taught a next-token permutation in a few
CPU steps (a random model's logits are nearly flat, so any rounding would flip its greedy
tokens) and saved to a local directory. Each user script then loads it with
``from_pretrained`` in a fresh emulated process, as a Gaudi user runs a program twice:

- the switch: ``HPU_PLUGIN_FP8=measure`` and then ``=quantize``, the script passing no
  quantization argument at all (the measure run through ``pipeline()``);
- ``quantization_config=GaudiFp8Config(path)``: the same script twice, the first run
  measures (``finish_measurement`` writes it), the second quantizes from it.

Checked against a bf16 run of the same script: the measurement is written by the measure
run and is what the quantize run reads; every ``nn.Linear`` becomes Neural Compressor's
``PatchedLinear`` with ``float8_e4m3fn`` weights; greedy tokens agree for at least 95% of
tokens, logits stay within 5% of their largest magnitude, the weights take less device
memory than in bf16, and ``generate()`` decodes the fp8 model through compiled graphs as it
does the bf16 one (a measuring model runs eagerly). Gaudi 1 is refused before any weight is
read, and a bad switch value turns the plugin off at ``import torch`` with one message.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
from processes import TAUGHT_LLAMA, emulated, result_of, run_python, scrubbed


def _transformers_has_the_registry() -> bool:
    """Whether the installed Transformers has the quantization registry and the
    ``get_hf_quantizer`` the adapter needs (read, not imported: collection stays cheap)."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return False
    root = Path(next(iter(spec.submodule_search_locations)))
    auto, modeling = root / "quantizers" / "auto.py", root / "modeling_utils.py"
    return (auto.is_file() and "def register_quantizer" in auto.read_text()
            and modeling.is_file() and "get_hf_quantizer" in modeling.read_text())


pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(importlib.util.find_spec("neural_compressor") is None,
                       reason="neural-compressor is not installed (requirements/test.txt "
                       "pins it)"),
    pytest.mark.skipif(not _transformers_has_the_registry(),
                       reason="this Transformers has no quantization registry: the fp8 "
                       "adapter stays out"),
]

PATCHED = "neural_compressor.torch.algorithms.fp8_quant._quant_common.helper_modules"
TIMEOUT = 900

#: Builds, trains (CPU, no emulator) and saves the model, with a word-level tokenizer whose
#: words are the token ids, so ``pipeline("text-generation")`` runs on it.
MAKE = TAUGHT_LLAMA + r"""
import json, sys
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

path = sys.argv[1]
model, loss = taught_llama(150)
model.save_pretrained(path)
words = models.WordLevel({f"t{i}": i for i in range(V)}, unk_token="t2")
tok = Tokenizer(words)
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t2", pad_token="t0",
                        bos_token="t1").save_pretrained(path)
calib = [" ".join(f"t{int(i)}" for i in row) for row in rows(4, 12)]
prompts = [torch.randint(0, V, (1, n), generator=gen)[0].tolist() for n in (5, 8, 11, 6)]
print("RESULT" + json.dumps({"loss": loss.item(), "calib": calib, "prompts": prompts}))
"""

#: What every generation script ends with: greedy tokens and logits of ``model`` for the
#: prompts, its weights' device memory, and what Neural Compressor made of its linears.
MEASURE_MODEL = r"""
from torch import nn

def report(model, prompts, weights_bytes):
    from hpu_emulator import counters

    tokens, logits = [], []
    counters.reset()
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p], device="hpu")
            out = model.generate(ids, max_new_tokens=16, min_new_tokens=16, do_sample=False)
            new = out[0, len(p):].cpu().tolist()
            tokens.append(new)
    compiled = counters.snapshot()["compiled_graphs"]
    with torch.no_grad():
        for p, new in zip(prompts, tokens):
            full = torch.tensor([p + new], device="hpu")
            logits.append(model(full).logits.float().cpu()[0].tolist())
    named = dict(model.named_modules())
    linears = {n: m for n, m in named.items() if n.endswith(("_proj", "lm_head"))}
    return {
        "tokens": tokens, "logits": logits, "weights_bytes": weights_bytes,
        "patched": sorted({f"{type(m).__module__}.{type(m).__name__}"
                           for m in linears.values()}),
        "weight_dtypes": sorted({str(m.weight.dtype) for m in linears.values()}),
        "plain_linears": [n for n, m in named.items() if type(m) is nn.Linear],
        "device": str(next(model.parameters()).device),
        "hf_quantizer": type(getattr(model, "hf_quantizer", None)).__name__,
        "compileable": getattr(getattr(model, "hf_quantizer", None), "is_compileable", None),
        "compiled_graphs": compiled,
    }
"""

#: bf16, then the switch's runs: the script passes no quantization argument.
PLAIN = MEASURE_MODEL + r"""
import json, sys
import torch
from transformers import AutoModelForCausalLM

path, prompts = sys.argv[1], json.loads(sys.argv[2])
before = torch.hpu.memory_allocated()
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).to("hpu")
weights = torch.hpu.memory_allocated() - before
print("RESULT" + json.dumps(report(model, prompts, weights)))
"""

#: The switch's measure run: a text-generation pipeline, nothing else.
PIPELINE = r"""
import json, sys
import torch
from transformers import pipeline

path, texts = sys.argv[1], json.loads(sys.argv[2])
pipe = pipeline("text-generation", model=path, dtype=torch.bfloat16)
outs = [pipe(t, max_new_tokens=4, do_sample=False)[0]["generated_text"] for t in texts]
layer = pipe.model.model.layers[0].self_attn.q_proj
print("RESULT" + json.dumps({"outs": outs, "q_proj": type(layer).__name__,
                             "device": str(pipe.model.device)}))
"""

#: The same script twice with ``GaudiFp8Config``: it measures, then it quantizes.
CONFIGURED = MEASURE_MODEL + r"""
import json, os, sys
import torch
from transformers import AutoModelForCausalLM
from hpu_plugin.fp8 import GaudiFp8Config, finish_measurement

path, prompts, stats = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
config = GaudiFp8Config(stats)
mode = config.resolved_mode()
before = torch.hpu.memory_allocated()
torch.hpu.reset_peak_memory_stats()
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16,
                                             quantization_config=config)
weights = torch.hpu.memory_allocated() - before
load_peak = torch.hpu.max_memory_allocated() - before
result = report(model, prompts, weights)
result["mode"], result["load_peak"] = mode, load_peak
if mode == "measure":
    result["written"] = finish_measurement(model)
print("RESULT" + json.dumps(result))
"""


def _emulated(generation: str, **extra: str) -> dict[str, str]:
    return emulated(HPU_PLUGIN_EMULATE=generation, **extra)


def _run(code: str, env: dict[str, str], *args: str) -> dict:
    done = run_python(code, env, timeout=TIMEOUT, args=args, check=True)
    return {**result_of(done.stdout), "stderr": done.stderr}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The trained model's directory, its calibration texts and prompts."""
    path = tmp_path_factory.mktemp("fp8_llama")
    made = _run(MAKE, scrubbed(OMP_NUM_THREADS="1"), str(path))
    assert made["loss"] < 0.1, made["loss"]
    return path, made


@pytest.fixture(scope="module", params=["gaudi2", "gaudi3"])
def bf16(request: pytest.FixtureRequest, tiny: tuple[Path, dict]) -> tuple[str, dict]:
    path, made = tiny
    return request.param, _run(PLAIN, _emulated(request.param), str(path),
                               json.dumps(made["prompts"]))


def _compare(generation: str, fp8: dict, ref: dict) -> tuple[float, float, float]:
    """Agreement of greedy tokens, logits error over their peak, fp8/bf16 weight memory."""
    pairs = zip(fp8["tokens"], ref["tokens"], strict=True)
    agree = sum(a == b for x, y in pairs for a, b in zip(x, y, strict=True))
    total = sum(len(x) for x in ref["tokens"])
    err = peak = 0.0
    for got, want in zip(fp8["logits"], ref["logits"], strict=True):
        for g_row, w_row in zip(got, want, strict=True):
            err = max(err, max(abs(g - w) for g, w in zip(g_row, w_row, strict=True)))
            peak = max(peak, max(abs(w) for w in w_row))
    memory = fp8["weights_bytes"] / ref["weights_bytes"]
    print(f"{generation}: {agree}/{total} tokens agree, max logits error {err:.4f} of "
          f"{peak:.2f}, weights {fp8['weights_bytes']} bytes vs bf16 {ref['weights_bytes']} "
          f"({memory:.2f})")
    assert total == 64
    return agree / total, err / peak, memory


def _assert_fp8(fp8: dict, ref: dict, generation: str) -> None:
    assert ref["patched"] == ["torch.nn.modules.linear.Linear"]
    assert ref["weight_dtypes"] == ["torch.bfloat16"]
    assert fp8["patched"] == [f"{PATCHED}.PatchedLinear"]
    assert fp8["weight_dtypes"] == ["torch.float8_e4m3fn"]
    assert fp8["plain_linears"] == []
    assert fp8["device"] == "hpu:0"
    assert fp8["hf_quantizer"] == "GaudiFp8HfQuantizer"
    # the converted model decodes through compiled graphs as the bf16 one does
    assert fp8["compileable"] is True
    assert fp8["compiled_graphs"] > 0 and ref["compiled_graphs"] > 0
    agreement, logits_err, memory = _compare(generation, fp8, ref)
    assert agreement >= 0.95
    assert 0.0 < logits_err <= 0.05
    assert memory < 1.0


def test_switch_measures_in_a_pipeline_then_quantizes(bf16, tiny, tmp_path: Path) -> None:
    generation, ref = bf16
    path, made = tiny
    stats = tmp_path / "fp8" / "measure"
    switch = {"HPU_PLUGIN_FP8_STATS": str(stats)}
    measured = _run(PIPELINE, _emulated(generation, HPU_PLUGIN_FP8="measure", **switch),
                    str(path), json.dumps(made["calib"]))
    assert measured["q_proj"] == "PatchedLinear"  # measuring: INC's observer module
    assert measured["device"] == "hpu:0"
    outs = zip(measured["outs"], made["calib"], strict=True)
    assert all(out.startswith(text) for out, text in outs)
    assert "fp8 measurement written to" in measured["stderr"]
    files = sorted(os.listdir(stats.parent))
    assert "measure_hooks_maxabs.npz" in files, files
    fp8 = _run(PLAIN, _emulated(generation, HPU_PLUGIN_FP8="quantize", **switch),
               str(path), json.dumps(made["prompts"]))
    _assert_fp8(fp8, ref, generation)


def test_quantization_config_measures_then_quantizes(bf16, tiny, tmp_path: Path) -> None:
    generation, ref = bf16
    path, made = tiny
    stats = str(tmp_path / "fp8" / "measure")
    args = (str(path), json.dumps(made["prompts"]), stats)
    measured = _run(CONFIGURED, _emulated(generation), *args)
    assert measured["mode"] == "measure"
    assert measured["written"] == [stats]
    assert measured["weight_dtypes"] == ["torch.bfloat16"]
    assert measured["tokens"] == ref["tokens"]  # measuring computes as bf16 does
    # its observers record in Python at each call: not compiled, every step runs them
    assert measured["compileable"] is False and measured["compiled_graphs"] == 0
    fp8 = _run(CONFIGURED, _emulated(generation), *args)
    assert fp8["mode"] == "quantize"
    _assert_fp8(fp8, ref, generation)
    # loaded on the CPU, each weight reaches the Gaudi as Neural Compressor converts it: the
    # device holds the fp8 model (0.55 of the bf16 bytes) and one bf16 weight at most, never
    # the bf16 model, so a model too big for one Gaudi in bf16 still loads in fp8
    print(f"fp8 load peak {fp8['load_peak']} bytes, bf16 weights {ref['weights_bytes']}")
    assert fp8["load_peak"] < 0.75 * ref["weights_bytes"], (fp8["load_peak"],
                                                            ref["weights_bytes"])


#: ``GaudiFp8Config`` with Neural Compressor's fixed unit scales, in the mode of argv[4]:
#: optimum-habana's ``unit_scale_quant.json`` flow, which quantizes with no measure run.
UNIT_SCALE = MEASURE_MODEL + r"""
import json, sys
import torch
from transformers import AutoModelForCausalLM
from hpu_plugin.fp8 import GaudiFp8Config

path, prompts, stats, mode = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
config = GaudiFp8Config(stats, mode=mode, inc_options={"scale_method": "unit_scale"})
resolved = config.resolved_mode()
before = torch.hpu.memory_allocated()
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16,
                                             quantization_config=config)
weights = torch.hpu.memory_allocated() - before
print("RESULT" + json.dumps({**report(model, prompts, weights), "mode": resolved}))
"""


@pytest.mark.parametrize("mode", ["quantize", "auto"])
def test_fixed_scales_quantize_without_a_measurement(bf16, tiny, tmp_path: Path,
                                                      mode: str) -> None:
    """Neural Compressor reads no measurement for fixed scales: neither mode asks for one,
    and ``auto`` quantizes rather than measures."""
    generation, ref = bf16
    path, made = tiny
    stats = tmp_path / "fp8" / "measure"
    fp8 = _run(UNIT_SCALE, _emulated(generation), str(path), json.dumps(made["prompts"]),
               str(stats), mode)
    assert fp8["mode"] == "quantize"
    _assert_fp8(fp8, ref, generation)
    assert not stats.parent.exists()  # nothing measured, nothing read


#: Loads the model with the config named in argv (none, or GaudiFp8Config(argv[3], mode=
#: argv[4]); argv[5] a device_map) and says what happened: the refusal, or what the model
#: became. The device memory after a refusal shows whether any weight was read.
LOAD = r"""
import json, sys
import torch
from transformers import AutoModelForCausalLM

path, kind = sys.argv[1], sys.argv[2]
kwargs = {"dtype": torch.bfloat16}
if kind == "config":
    from hpu_plugin.fp8 import GaudiFp8Config
    kwargs["quantization_config"] = GaudiFp8Config(sys.argv[3], mode=sys.argv[4])
if sys.argv[5:]:
    kwargs["device_map"] = sys.argv[5]
try:
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
except Exception as exc:
    result = {"error": type(exc).__name__, "message": str(exc),
              "memory": torch.hpu.memory_allocated()}
else:
    q_proj = model.model.layers[0].self_attn.q_proj
    result = {"q_proj": type(q_proj).__name__, "weight": str(q_proj.weight.dtype),
              "method": model.config.quantization_config.mode}
print("RESULT" + json.dumps(result))
"""


def test_gaudi1_is_refused_before_weights_load(tiny, tmp_path: Path) -> None:
    path, _ = tiny
    stats = str(tmp_path / "measure")
    configured = _run(LOAD, _emulated("gaudi"), str(path), "config", stats, "auto")
    switched = _run(LOAD, _emulated("gaudi", HPU_PLUGIN_FP8="measure",
                                    HPU_PLUGIN_FP8_STATS=stats), str(path), "none")
    for refused in (configured, switched):
        assert refused["error"] == "GaudiConfigError", refused
        assert refused["message"].startswith("quantization_config (gaudi_fp8)='fp8': fp8 is "
                                             "not available on first-generation Gaudi")
        assert "fp8 on GAUDI2 and GAUDI3" in refused["message"]
        assert "unset HPU_PLUGIN_FP8" in refused["message"]
        assert refused["memory"] == 0
    assert not list(tmp_path.iterdir())


def test_quantize_without_a_measurement_is_refused_before_weights_load(tiny, tmp_path: Path):
    path, _ = tiny
    stats = str(tmp_path / "nothing" / "measure")
    env = _emulated("gaudi2", HPU_PLUGIN_FP8="quantize", HPU_PLUGIN_FP8_STATS=stats)
    refused = _run(LOAD, env, str(path), "none")
    assert refused["error"] == "GaudiConfigError"
    assert f"dump_stats_path (HPU_PLUGIN_FP8_STATS)={stats!r}" in refused["message"]
    assert "HPU_PLUGIN_FP8=measure" in refused["message"]
    assert refused["memory"] == 0


def test_a_device_map_off_the_gaudi_is_refused_before_weights_load(tiny, tmp_path: Path):
    """Neural Compressor measures and converts the whole model on the Gaudi: the user's
    device_map="cpu" would be overridden, so it is refused, naming the fix."""
    path, _ = tiny
    refused = _run(LOAD, _emulated("gaudi2"), str(path), "config",
                   str(tmp_path / "fp8" / "measure"), "measure", "cpu")
    assert refused["error"] == "GaudiConfigError", refused
    assert refused["message"].startswith("device_map=")
    assert "gaudi_fp8 cannot keep weights off the Gaudi" in refused["message"]
    assert "Fix: pass device_map='hpu' (or none)" in refused["message"]
    assert refused["memory"] == 0
    assert not (tmp_path / "fp8").exists()


def test_the_users_quantization_config_wins_over_the_switch(tiny, tmp_path: Path) -> None:
    # the switch asks to quantize from a measurement that is not there; the user's config,
    # measuring elsewhere, is what loading follows
    path, _ = tiny
    env = _emulated("gaudi2", HPU_PLUGIN_FP8="quantize",
                    HPU_PLUGIN_FP8_STATS=str(tmp_path / "nothing" / "measure"))
    loaded = _run(LOAD, env, str(path), "config", str(tmp_path / "mine" / "measure"),
                  "measure")
    assert loaded == {**loaded, "q_proj": "PatchedLinear", "weight": "torch.bfloat16",
                      "method": "measure"}
    assert (tmp_path / "mine" / "measure_hooks_maxabs.npz").is_file()  # written at exit
    assert not (tmp_path / "nothing").exists()


def test_a_path_without_a_folder_measures_in_the_working_directory(tiny, tmp_path: Path):
    """``GaudiFp8Config("measure")``: Neural Compressor makes the folder of the path, which
    names none here."""
    path, _ = tiny
    done = run_python(LOAD, _emulated("gaudi2"), timeout=TIMEOUT, cwd=tmp_path, check=True,
                      args=(str(path), "config", "measure", "measure"))
    assert result_of(done.stdout)["method"] == "measure"
    assert (tmp_path / "measure_hooks_maxabs.npz").is_file()  # written at exit


STATUS = r"""
import json
import torch
import hpu_plugin
print("RESULT" + json.dumps({"status": hpu_plugin.state["status"]}))
"""


@pytest.mark.parametrize(("switch", "named", "fix"), [
    ({"HPU_PLUGIN_FP8": "fast"}, "HPU_PLUGIN_FP8='fast' is not usable",
     "HPU_PLUGIN_FP8=measure and HPU_PLUGIN_FP8_STATS=<dir>/measure"),
    ({"HPU_PLUGIN_FP8": "quantize"}, "HPU_PLUGIN_FP8=quantize needs HPU_PLUGIN_FP8_STATS",
     "set HPU_PLUGIN_FP8_STATS=<dir>/measure"),
])
def test_a_bad_switch_is_refused_at_import_with_one_message(switch, named, fix) -> None:
    done = run_python(STATUS, _emulated("gaudi2", **switch), timeout=TIMEOUT, check=True)
    assert result_of(done.stdout) == {"status": "failed"}
    ours = [line for line in done.stderr.splitlines() if "hpu_plugin" in line]
    assert len(ours) == 1, done.stderr
    assert ours[0].count(named) == 1 and fix in ours[0]


INC_OPTIONS = r"""
import json
from hpu_plugin.fp8 import GaudiFp8Config

try:
    GaudiFp8Config("./fp8/measure", inc_options={"blocklst": {"names": ["lm_head"]}})
    result = {"error": None}
except ValueError as exc:
    result = {"error": str(exc)}
GaudiFp8Config("./fp8/measure", inc_options={"blocklist": {"names": ["lm_head"]}})
# keywords FP8Config passes to its fp8 configuration without naming them
taken = GaudiFp8Config("./fp8/measure", inc_options={"dynamic_quantization": True,
                                                    "ignore_modules_wo_measures": "True",
                                                    "blacklist": {"names": ["lm_head"]}})
result["auto_mode"] = taken.resolved_mode()
print("RESULT" + json.dumps(result))
"""


@pytest.mark.skipif(importlib.util.find_spec("neural_compressor") is None,
                    reason="Neural Compressor names the options")
def test_a_misspelt_inc_option_is_refused_when_the_config_is_made() -> None:
    """Neural Compressor's FP8Config takes any keyword and fails after the weights load."""
    got = _run(INC_OPTIONS, _emulated("gaudi2"))
    assert got["error"].startswith("GaudiFp8Config(inc_options=...): 'blocklst' is not an "
                                   "option of Neural Compressor's FP8Config (did you mean "
                                   "'blocklist'?)")
    assert got["auto_mode"] == "quantize"  # dynamic quantization reads no measurement
