"""sentence-transformers 6.2.0 on the emulated Gaudi, as its users write it.

Each subprocess test runs real sentence-transformers on a real ``import torch``: activation
installs the adapter and the Gaudi workarounds, as for a user. The models are tiny BERTs
built from a config and saved locally; the tokenizer gives no ``token_type_ids`` (as many
sentence-embedding tokenizers do), so BERT gathers its int64 buffer on the device.
"""

from __future__ import annotations

import json
import pickle
import textwrap
import types
from pathlib import Path

import pytest
from processes import emulated, run_python, scrubbed

from hpu_plugin import patching
from hpu_plugin.hosts import replacing, support
from hpu_plugin.hosts import sentence_transformers_adapter as adapter
from hpu_plugin.patching import Patches

pytest.importorskip("sentence_transformers")

_BUILD = """
    import os, sys
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    def build(folder):
        words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(40)]
        with open(os.path.join(folder, "vocab.txt"), "w") as handle:
            handle.write("\\n".join(words))
        tokenizer = BertTokenizerFast(
            os.path.join(folder, "vocab.txt"), model_input_names=["input_ids", "attention_mask"]
        )
        tokenizer.save_pretrained(folder)
        config = BertConfig(vocab_size=len(words), hidden_size=32, num_hidden_layers=2,
                            num_attention_heads=2, intermediate_size=37,
                            max_position_embeddings=64)
        torch.manual_seed(0)
        BertModel(config).save_pretrained(folder)

    SENTENCES = [" ".join(f"w{(i * 7 + j) % 40}" for j in range(3 + i % 5)) for i in range(8)]
"""

_ENCODE = _BUILD + """
    import importlib.util, json
    from hpu_plugin.hosts import transformers_gaudi_ops
    from sentence_transformers import SentenceTransformer

    folder = sys.argv[1]
    build(folder)
    ops_before = transformers_gaudi_ops.installed()  # nothing asked is_torch_hpu_available
    on_hpu = SentenceTransformer(folder)  # no device: sentence-transformers finds Gaudi
    features = on_hpu.preprocess(SENTENCES[:1])
    hpu = on_hpu.encode(SENTENCES, convert_to_tensor=True).cpu()
    cpu = SentenceTransformer(folder, device="cpu").encode(SENTENCES, convert_to_tensor=True)
    print(json.dumps({
        "optimum": importlib.util.find_spec("optimum") is not None,
        "optimum_habana": importlib.util.find_spec("optimum.habana") is not None,
        "device": str(on_hpu.device),
        "token_type_ids": "token_type_ids" in features,
        "ops_before": ops_before,
        "max_diff": float((hpu - cpu).abs().max()),
    }))
"""


@pytest.mark.e2e
def test_encode_on_hpu_with_optimum_and_no_token_type_ids_equals_the_cpu(tmp_path: Path):
    """``optimum`` installed without optimum-habana (requirements/test.txt pins it) and a
    tokenizer without token_type_ids: both failed on hpu before (ModuleNotFoundError, then
    synStatus 26 on BERT's int64 gather)."""
    done = run_python(_ENCODE, emulated(), timeout=300, args=[str(tmp_path)], check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["optimum"] and not result["optimum_habana"]
    assert result["device"] == "hpu:0"
    assert result["token_type_ids"] is False
    assert result["ops_before"] is True  # in place from activation, whoever asks first
    assert result["max_diff"] < 1e-5


@pytest.mark.e2e
def test_without_gaudi_nothing_is_registered_or_patched():
    done = run_python(
        """
        import json, torch
        from hpu_plugin.hosts import transformers_gaudi_ops
        import sentence_transformers.base.model as base
        import importlib
        print(json.dumps([transformers_gaudi_ops.installed(), base.importlib is importlib,
                          hasattr(base.BaseModel.start_multi_process_pool, "__hpu_plugin__")]))
        """,
        scrubbed(), timeout=300, check=True,
    )
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [False, True, False]


_PROBE = '''
import os, time
import torch
from torch import nn


def _barrier():
    """Hold each worker's first chunk until every worker has one, so that each encodes."""
    folder = os.environ["PROBE_DIR"]
    open(os.path.join(folder, str(os.getpid())), "w").close()
    deadline = time.monotonic() + 200
    while len(os.listdir(folder)) < int(os.environ["PROBE_WORKERS"]):
        assert time.monotonic() < deadline, "the other pool workers never started"
        time.sleep(0.1)


class ModuleId(nn.Module):
    """Appends the Gaudi module id the process acquired (-1 off hpu) to each embedding."""

    def forward(self, features):
        emb = features["sentence_embedding"]
        module = -1.0
        if emb.device.type == "hpu":
            if not os.path.exists(os.path.join(os.environ["PROBE_DIR"], str(os.getpid()))):
                _barrier()
            module = float(torch.hpu.get_device_properties().module_id)
        column = torch.full((emb.shape[0], 1), module, device=emb.device)
        features["sentence_embedding"] = torch.cat([emb, column], dim=1)
        return features
'''

_POOL = _BUILD + """
    import json
    from probe_module import ModuleId
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    folder = sys.argv[1]
    build(folder)

    def model(device):
        transformer = Transformer(folder)
        pooling = Pooling(transformer.get_embedding_dimension())
        return SentenceTransformer(modules=[transformer, pooling, ModuleId()], device=device)

    cpu_model = model("cpu")
    cpu = cpu_model.encode(SENTENCES, convert_to_tensor=True)
    pool = cpu_model.start_multi_process_pool()
    try:
        out = cpu_model.encode(SENTENCES, pool=pool, chunk_size=1, convert_to_tensor=True)
    finally:
        cpu_model.stop_multi_process_pool(pool)
    result = {
        "workers": len(pool["processes"]),
        "modules": sorted({int(v) for v in out[:, -1].tolist()}),
        "max_diff": float((out[:, :-1] - cpu[:, :-1]).abs().max()),
    }
    on_hpu = model("hpu")  # this process now holds module 0
    for devices in (["hpu:0"], ["hpu:1", "hpu:1"]):
        try:
            on_hpu.start_multi_process_pool(devices)
        except ValueError as exc:
            result[devices[0]] = str(exc)
    print(json.dumps(result))
"""


@pytest.mark.e2e
def test_pool_takes_one_gaudi_module_per_worker(tmp_path: Path):
    """Two emulated Gaudis: with no target devices, a pool gets one worker per Gaudi, each
    on its own module (sentence-transformers alone starts four CPU workers); a model on hpu
    holds module 0, so a worker there, or two workers on one device, are refused before any
    starts."""
    (tmp_path / "probe_module.py").write_text(textwrap.dedent(_PROBE))
    (tmp_path / "started").mkdir()
    env = emulated(HPU_PLUGIN_EMULATE_DEVICES="2", PYTHONPATH=str(tmp_path),
                   PROBE_DIR=str(tmp_path / "started"), PROBE_WORKERS="2")
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    done = run_python(_POOL, env, timeout=400, args=[str(model_dir)], check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["workers"] == 2
    assert result["modules"] == [0, 1]  # as each worker's own torch.hpu reports it
    assert result["max_diff"] < 1e-5
    assert "hpu:0 (Gaudi module 0) is held by this process" in result["hpu:0"]
    assert "hpu:1 (Gaudi module 1) is held by another worker" in result["hpu:1"]


# -- the rules, in process ------------------------------------------------------------------


def test_default_workers_skip_the_module_this_process_holds():
    workers = adapter.default_hpu_workers((4, 5, 6, 7), held=4)
    assert [(str(w), w.module) for w in workers] == [("hpu:1", 5), ("hpu:2", 6), ("hpu:3", 7)]


def test_no_free_module_is_a_clear_error_with_the_fix():
    with pytest.raises(adapter.PoolError, match=r"held by this process.*target_devices=\['cpu'\]"):
        adapter.default_hpu_workers((3,), held=3)


@pytest.mark.parametrize(
    ("devices", "problem"),
    [(["hpu:0"], "held by this process"), (["hpu", "hpu:0"], "held by this process"),
     (["hpu:1", "hpu:1"], "held by another worker"), (["hpu:2"], "not one of the 2"),
     (["hpu:x"], "not a device name"), (["hpu:"], "not a device name")],
)
def test_explicit_hpu_devices_break_no_gaudi_rule(devices, problem):
    with pytest.raises(adapter.PoolError, match=problem):
        adapter.hpu_workers(devices, (0, 1), held=0)


def test_explicit_devices_keep_what_is_not_hpu_and_map_hpu_to_modules():
    workers = adapter.hpu_workers(["cpu", "hpu:1", "cuda:0"], (2, 3), held=None)
    assert workers[0] == "cpu" and workers[2] == "cuda:0"
    assert isinstance(workers[1], adapter.WorkerDevice) and workers[1].module == 3
    copy = pickle.loads(pickle.dumps(workers[1]))  # how it reaches a spawned worker
    assert (str(copy), copy.module) == ("hpu:1", 3)


def test_optimum_without_optimum_habana_is_not_found_by_the_branch(monkeypatch):
    narrow = adapter.importlib_for_base_model()
    monkeypatch.setattr(adapter, "optimum_habana_installed", lambda: False)
    assert narrow.util.find_spec("optimum") is None
    assert narrow.util.find_spec("json") is not None
    assert not hasattr(narrow, "import_module")  # only what the tested releases ask
    monkeypatch.setattr(adapter, "optimum_habana_installed", lambda: True)
    assert narrow.util.find_spec("optimum") is not None


def test_the_branch_patch_is_made_once_and_undone():
    import importlib

    module = types.ModuleType("sentence_transformers.base.model")
    module.importlib = importlib
    patches = Patches()
    adapter.install_optimum_branch(patches, module)
    adapter.install_optimum_branch(patches, module)
    assert patches.made == ["sentence_transformers.base.model.importlib"]
    assert module.importlib is not importlib
    patches.undo()
    assert module.importlib is importlib


def test_a_module_without_the_importlib_name_is_left_alone():
    module = types.ModuleType("sentence_transformers.base.model")
    patches = Patches()
    adapter.install_optimum_branch(patches, module)
    assert patches.made == []
    assert "sentence-transformers optimum branch" in patching.this_process.stayed_out


@pytest.mark.parametrize(
    ("version", "known"), [("6.2.0", True), ("6.2.0+local", True), ("6.2.1", False), ("?", False)]
)
def test_only_tested_releases_are_adapted(version, known):
    assert adapter.known_release(version) is known
    assert support.SENTENCE_TRANSFORMERS_TESTED == ("6.2.0",)


def test_the_tested_release_uses_importlib_in_base_model_only_for_find_spec():
    """What the narrow patch relies on, read in the installed release's source."""
    import re

    if not adapter.known_release(replacing.host_version(adapter.HOST)):
        pytest.skip("not a tested sentence-transformers release: the adapter stays out")
    import sentence_transformers.base.model as base_model

    source = Path(base_model.__file__).read_text()
    uses = set(re.findall(r"(?<![\w.])importlib(?:\.\w+)*", source))
    assert uses == {"importlib", "importlib.util.find_spec"}
