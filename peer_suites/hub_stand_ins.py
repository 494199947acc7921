"""Tiny random models in a private Hub cache, under the ids PEFT's device tests load.

PEFT's tests that run on an accelerator (tests/test_common_gpu.py) load small checkpoints
such as ``peft-internal-testing/opt-125m`` from the Hub. The peer runs are offline (the
project downloads no weights at run time), so the cache named by ``HF_HOME`` for those runs
holds a model built from a small config of the same architecture under that id. The tests
then check what a device backend decides (placement, bitsandbytes 4-bit on the device,
LoRA merge/unmerge, adapters) — not the real checkpoint's numbers. The cache is outside the
repository, next to the sdists, and the user's own Hub cache is never touched.

Accelerate's ``test_infer_auto_device_map_on_t0pp`` reads only the *configuration* of
``bigscience/T0pp`` (the model is built with ``init_empty_weights``, on the meta device):
its published config.json, a few architecture numbers, is served under that id.
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


# bigscience/T0pp's published config.json (a T5 v1.1 XXL): only the config is read, for
# sizes; no weights exist here.
_CONFIG_ONLY: dict[str, dict[str, object]] = {
    "bigscience/T0pp": {
        "architectures": ["T5ForConditionalGeneration"],
        "model_type": "t5",
        "d_ff": 10240,
        "d_kv": 64,
        "d_model": 4096,
        "decoder_start_token_id": 0,
        "dropout_rate": 0.1,
        "eos_token_id": 1,
        "feed_forward_proj": "gated-gelu",
        "initializer_factor": 1.0,
        "is_encoder_decoder": True,
        "layer_norm_epsilon": 1e-06,
        "num_decoder_layers": 24,
        "num_heads": 64,
        "num_layers": 24,
        "output_past": True,
        "pad_token_id": 0,
        "relative_attention_num_buckets": 32,
        "tie_word_embeddings": False,
        "vocab_size": 32128,
    }
}


def _revision(config: dict[str, object]) -> str:
    """The snapshot name: the config's digest, so that a changed stand-in is rebuilt."""
    text = json.dumps(config, sort_keys=True).encode("utf-8")
    return hashlib.sha1(text).hexdigest()  # a cache key, not a secret


def prepare(hf_home: Path) -> Path:
    """Write the stand-ins into ``hf_home/hub`` once; return ``hf_home``."""
    from transformers import OPTConfig, OPTForCausalLM, set_seed

    hub = hf_home / "hub"
    for model_id in _OPT_IDS:
        repo = hub / f"models--{model_id.replace('/', '--')}"
        snapshot = repo / "snapshots" / _revision(_opt_config())
        if (snapshot / "config.json").exists():
            continue
        set_seed(0)
        OPTForCausalLM(OPTConfig(**_opt_config())).save_pretrained(snapshot)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(_revision(_opt_config()), encoding="utf-8")
        (snapshot / "stand_in.json").write_text(
            json.dumps({"built_by": "peer_suites.hub_stand_ins", "config": _opt_config()}),
            encoding="utf-8",
        )
    for model_id, config in _CONFIG_ONLY.items():
        repo = hub / f"models--{model_id.replace('/', '--')}"
        snapshot = repo / "snapshots" / _revision(config)
        snapshot.mkdir(parents=True, exist_ok=True)
        (snapshot / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(_revision(config), encoding="utf-8")
    return hf_home
