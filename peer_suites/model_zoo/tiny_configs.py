"""A tiny config for any architecture Transformers ships, built from its config class.

Transformers' sdist carries no model testers, so each architecture's tiny config is made
here the same way for all: the class's defaults, with every size field it has shrunk (two
layers, width 32, four heads, a vocabulary of 99, four experts...) and dropout, layer drop
and router jitter off, passed
to the constructor so that fields derived from them (``layer_types``, ``head_dim``) follow.
Hybrid models whose first layers are all linear attention or state-space layers are given
more layers until one attention layer is among them. What still cannot be built from such
a config fails in the CPU run as in the hpu run, and the comparison counts it as one that
does not build.
"""

from __future__ import annotations

from typing import Any

import torch
import transformers

#: The size fields and the tiny value each gets, where the config class has the field.
SIZES: dict[str, Any] = {
    "vocab_size": 99, "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
    "intermediate_size": 48, "max_position_embeddings": 128, "head_dim": 8,
    "n_embd": 32, "n_head": 4, "n_positions": 128, "d_model": 32, "d_ff": 48, "d_kv": 8,
    "num_heads": 4, "encoder_attention_heads": 4, "decoder_attention_heads": 4,
    "encoder_ffn_dim": 48, "decoder_ffn_dim": 48, "ffn_dim": 48, "rotary_dim": 8,
    # mixture of experts: multiples of 16 bytes, as the grouped GEMM wants its strides
    "num_experts": 4, "num_local_experts": 4, "num_experts_per_tok": 2,
    "moe_intermediate_size": 16, "shared_expert_intermediate_size": 16,
    "n_routed_experts": 4, "n_shared_experts": 1, "first_k_dense_replace": 1,
    "n_group": 1, "topk_group": 1,
    # multi-head latent attention
    "kv_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
    "v_head_dim": 8,
    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 0,
}
#: The layer-count fields, set to the number of layers tried.
LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "encoder_layers", "decoder_layers",
          "num_decoder_layers")
#: Layer counts tried in turn: hybrid models need enough layers to hold an attention layer.
LAYER_COUNTS = (2, 4, 8)
#: A model above this many parameters kept a size field this module does not know.
MAX_PARAMETERS = 16_000_000
#: Parts of the names of fields that make training draw random numbers (dropout, layer drop,
#: router jitter): set to 0, so that two copies of a model train alike.
RANDOM_IN_TRAINING = ("dropout", "_pdrop", "layerdrop", "jitter")
#: Batch and sequence length of the inputs.
BATCH, LENGTH = 2, 7


class NotTiny(ValueError):
    """The architecture's config has sizes that the generic shrinking does not reach."""


def tiny_config(model_class: type, kind: str, layers: int = 2) -> Any:
    """``model_class``'s config with every known size field tiny and dropout off."""
    config_class = model_class.config_class
    defaults = config_class()
    settable = {name: value for name, value in SIZES.items() if hasattr(defaults, name)
                and not isinstance(getattr(config_class, name, None), property)}
    if hasattr(defaults, "kv_lora_rank"):  # latent attention: one key-value head per head
        settable.pop("head_dim", None)
        settable.pop("num_key_value_heads", None)
    for name in LAYERS:
        if hasattr(defaults, name) and not isinstance(getattr(config_class, name, None),
                                                      property):
            settable[name] = layers
    if kind == "causal" and hasattr(defaults, "is_decoder"):
        settable["is_decoder"] = True
    config = config_class(**settable)
    if getattr(config, "is_encoder_decoder", False) and getattr(
            config, "decoder_start_token_id", None) is None:
        config.decoder_start_token_id = 0  # as T5's checkpoints set it; its class has none
    for name, value in list(vars(config).items()):
        if isinstance(value, float) and any(word in name for word in RANDOM_IN_TRAINING):
            setattr(config, name, 0.0)
    return config


def build(model_class: type, kind: str, inputs: dict[str, torch.Tensor]) -> torch.nn.Module:
    """A tiny ``model_class`` on the CPU, seeded, in eval mode, that runs ``inputs``.

    Raises what building or the first forward raised, or :class:`NotTiny`."""
    failure: Exception | None = None
    for layers in LAYER_COUNTS:
        config = tiny_config(model_class, kind, layers)
        with torch.device("meta"):
            count = sum(p.numel() for p in model_class(config).parameters())
        if count > MAX_PARAMETERS:
            raise NotTiny(f"{model_class.__name__} has {count} parameters with sizes shrunk")
        torch.manual_seed(0)
        model = model_class(config).eval()
        try:
            with torch.no_grad():
                model(**inputs)
        except ValueError as exc:  # a hybrid with no attention layer among the first ones
            if "get_seq_length" not in str(exc):
                raise
            failure = exc
            continue
        return model
    assert failure is not None
    raise failure


def architectures(kind: str) -> dict[str, str]:
    """``model_type -> model class name`` of Transformers' auto mapping for ``kind``."""
    from transformers.models.auto import modeling_auto

    mapping = {
        "causal": modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        "masked": modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES,
        "seq2seq": modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
    }[kind]
    found = {}
    for model_type, names in mapping.items():
        name = names[0] if isinstance(names, (list, tuple)) else names
        if hasattr(transformers, name):
            found[model_type] = name
    return dict(sorted(found.items()))
