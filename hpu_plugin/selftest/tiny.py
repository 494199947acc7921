"""A tiny Llama and its tokenizer, built from a config and saved to a local directory.

The checks never download: a Gaudi server is often offline, and a download failure would
hide what the check is about. Small enough to run in a second on the emulator.
"""

from __future__ import annotations

import tempfile

WORDS = "intel gaudi is a deep learning accelerator that runs pytorch in eager mode".split()
CONFIG = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 128,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 2,
}


def checkpoint(seed: int = 0) -> str:
    """Save the model and tokenizer to a new temporary directory; returns its path."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path = tempfile.mkdtemp(prefix="hpu-selftest-")
    vocab = {word: i for i, word in enumerate(["<unk>", "<s>", "</s>", *WORDS])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="</s>",
        model_input_names=["input_ids", "attention_mask"],
    ).save_pretrained(path)
    torch.manual_seed(seed)
    LlamaForCausalLM(LlamaConfig(vocab_size=len(vocab), **CONFIG)).save_pretrained(path)
    return path


def model(seed: int = 0) -> object:
    """The tiny Llama in memory, on CPU, in evaluation mode."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(vocab_size=len(WORDS) + 3, **CONFIG)).eval()
