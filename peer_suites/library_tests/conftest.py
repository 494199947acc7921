"""Tiny models and tokenizers built from a config (nothing is downloaded), and the device the
libraries should choose on their own: ``hpu`` in the peer suites' hpu run, ``cpu`` in the
CPU run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "<s>", "</s>"] + [
    f"w{i}" for i in range(60)
]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "full: only in `python -m peer_suites run --subset full`")


@pytest.fixture(scope="session")
def device() -> str:
    """What the libraries pick with no device given: Gaudi when one is ready."""
    hpu = getattr(torch, "hpu", None)
    return "hpu" if hpu is not None and hpu.is_available() else "cpu"


def sentences(count: int = 8) -> list[str]:
    return [" ".join(f"w{(i * 7 + j) % 60}" for j in range(3 + i % 5)) for i in range(count)]


def _vocab(folder: Path) -> Path:
    path = folder / "vocab.txt"
    path.write_text("\n".join(WORDS), encoding="utf-8")
    return path


def bert_folder(folder: Path, head: str = "", token_type_ids: bool = False) -> str:
    """A 2-layer BERT (``head``: "" or "ForSequenceClassification") and its tokenizer, saved."""
    import transformers

    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if token_type_ids else [])
    transformers.BertTokenizerFast(str(_vocab(folder)), model_input_names=names).save_pretrained(
        folder
    )
    config = transformers.BertConfig(
        vocab_size=len(WORDS), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=37, max_position_embeddings=64, num_labels=1,
    )
    torch.manual_seed(0)
    getattr(transformers, f"Bert{head or 'Model'}")(config).save_pretrained(folder)
    return str(folder)


def causal_lm_folder(folder: Path) -> str:
    """A 2-layer Qwen2 causal LM with a word-level tokenizer and a chat template, saved."""
    import transformers
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    tokenizer = Tokenizer(WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="[PAD]", eos_token="</s>", bos_token="<s>",
        unk_token="[UNK]",
    )
    fast.chat_template = (
        "{% for m in messages %}{{ m['content'] }} </s> {% endfor %}"
        "{% if add_generation_prompt %}<s> {% endif %}"
    )
    fast.save_pretrained(folder)
    config = transformers.Qwen2Config(
        vocab_size=len(WORDS), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        pad_token_id=0, eos_token_id=6, bos_token_id=5, tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    transformers.Qwen2ForCausalLM(config).save_pretrained(folder)
    return str(folder)
