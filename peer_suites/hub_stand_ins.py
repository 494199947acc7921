"""Tiny random models in a private Hub cache, under the ids PEFT's device tests load.

PEFT's tests that run on an accelerator (tests/test_common_gpu.py) load small checkpoints
such as ``peft-internal-testing/opt-125m`` from the Hub. The peer runs are offline (the
project downloads no weights at run time), so the cache named by ``HF_HOME`` for those runs
holds a model built from a small config of the same architecture under that id. The tests
then check what a device backend decides (placement, bitsandbytes 4-bit on the device,
LoRA merge/unmerge, adapters) — not the real checkpoint's numbers. The cache is outside the
repository, next to the sdists, and the user's own Hub cache is never touched.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

# id -> OPT config of the stand-in (OPT is what these ids are).
_OPT_IDS = ("peft-internal-testing/opt-125m", "facebook/opt-350m")


def _opt_config() -> dict[str, object]:
    return {
        "vocab_size": 256,
        "hidden_size": 64,
        "ffn_dim": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "word_embed_proj_dim": 64,
        "max_position_embeddings": 128,
        "pad_token_id": 1,
        "bos_token_id": 2,
        "eos_token_id": 2,
        # Weights 10x OPT's default spread, so that the logits are as peaked as a trained
        # checkpoint's: PEFT's 8-bit merge tests compare softmax outputs with atol=1e-3 and
        # rtol=1, which a near-uniform distribution over 256 tokens meets whatever LoRA adds.
        "init_std": 0.2,
    }


def _revision() -> str:
    """The snapshot name: the config's digest, so that a changed stand-in is rebuilt."""
    text = json.dumps(_opt_config(), sort_keys=True).encode("utf-8")
    return hashlib.sha1(text).hexdigest()  # a cache key, not a secret


def prepare(hf_home: Path) -> Path:
    """Write the stand-ins into ``hf_home/hub`` once; return ``hf_home``."""
    from transformers import OPTConfig, OPTForCausalLM, set_seed

    hub = hf_home / "hub"
    for model_id in _OPT_IDS:
        repo = hub / f"models--{model_id.replace('/', '--')}"
        snapshot = repo / "snapshots" / _revision()
        if (snapshot / "config.json").exists():
            continue
        set_seed(0)
        OPTForCausalLM(OPTConfig(**_opt_config())).save_pretrained(snapshot)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(_revision(), encoding="utf-8")
        (snapshot / "stand_in.json").write_text(
            json.dumps({"built_by": "peer_suites.hub_stand_ins", "config": _opt_config()}),
            encoding="utf-8",
        )
    return hf_home
