"""``Trainer(torch_compile=True)`` with Transformers' own collators on the emulated Gaudi:
every batch length lands on a bucket, padding is masked, and each step's loss equals the
loss of the same training uncompiled (nothing padded), within float tolerance.

One script a case; it trains the compiled and the plain model in one process, from the
same seed, and reports per step the shapes the model saw and the loss. Dropout is off: it
draws one random number per element, so a padded batch would draw other masks."""

from __future__ import annotations

import pytest
from processes import result_of

from .conftest import TRAINING_COLLATOR

SCRIPT = TRAINING_COLLATOR + """
import json, random, torch
from tokenizers import Tokenizer, models
from transformers import (PreTrainedTokenizerFast, Trainer, TrainingArguments, TrainerCallback,
    DataCollatorWithPadding, DataCollatorForLanguageModeling, DataCollatorForSeq2Seq,
    default_data_collator, BertConfig, BertForMaskedLM, BertForSequenceClassification,
    LlamaConfig, LlamaForCausalLM, T5Config, T5ForConditionalGeneration)

vocab = {"[PAD]": 0, "[UNK]": 1, "[MASK]": 2, **{f"w{i}": i for i in range(3, 120)}}
tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, "[UNK]")),
                              pad_token="[PAD]", unk_token="[UNK]", mask_token="[MASK]",
                              eos_token="[UNK]")
CASE = "CASE_NAME"
rng = random.Random(0)
lengths = [rng.randint(3, 150) for _ in range(16)]
def ids(i, n):
    return [3 + (i * 5 + j) % 110 for j in range(n)]

def build():
    torch.manual_seed(0)
    small = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                 num_attention_heads=4, vocab_size=128, pad_token_id=0)
    if CASE in ("with_padding", "mlm"):
        config = BertConfig(max_position_embeddings=512, num_labels=3, hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=0.0, **small)
        return (BertForSequenceClassification if CASE == "with_padding"
                else BertForMaskedLM)(config)
    if CASE == "seq2seq":
        return T5ForConditionalGeneration(T5Config(
            vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
            pad_token_id=0, decoder_start_token_id=0, eos_token_id=1, dropout_rate=0.0))
    return LlamaForCausalLM(LlamaConfig(num_key_value_heads=2, max_position_embeddings=1024,
                                        bos_token_id=1, eos_token_id=2, **small))

def rows(model):
    if CASE == "with_padding":
        return [{"input_ids": ids(i, n), "labels": i % 3} for i, n in enumerate(lengths)]
    if CASE in ("mlm", "causal_lm"):
        return [{"input_ids": ids(i, n)} for i, n in enumerate(lengths)]
    if CASE == "seq2seq":
        return [{"input_ids": ids(i, n), "labels": ids(i + 1, 1 + n // 3)}
                for i, n in enumerate(lengths)]
    # pre-padded to one length (100, not a bucket), as tokenizer(padding="max_length") does
    out = []
    for i, n in enumerate(lengths):
        n = min(n, 100)
        out.append({"input_ids": ids(i, n) + [0] * (100 - n),
                    "attention_mask": [1] * n + [0] * (100 - n),
                    "labels": ids(i, n) + [-100] * (100 - n)})
    return out

def collator(model):
    if CASE == "with_padding":
        return DataCollatorWithPadding(tok)
    if CASE == "mlm":
        return DataCollatorForLanguageModeling(tok, mlm=True, seed=0)
    if CASE == "causal_lm":
        return DataCollatorForLanguageModeling(tok, mlm=False)
    if CASE == "seq2seq":
        return DataCollatorForSeq2Seq(tok, model=model)
    return default_data_collator

class Seen(Trainer):
    def compute_loss(self, model, inputs, *args, **kwargs):
        self.seen.append({k: list(v.shape) for k, v in inputs.items() if v.ndim == 2})
        return super().compute_loss(model, inputs, *args, **kwargs)

class Losses(TrainerCallback):
    def __init__(self):
        self.losses = []
    def on_log(self, args, state, control, logs=None, **kw):
        if logs and "loss" in logs:
            self.losses.append(logs["loss"])

def train(compiled):
    model = build().train().to("hpu")
    losses = Losses()
    sampling = {}
    if CASE == "causal_lm":  # the length-grouped sampler (named so from Transformers 5)
        import inspect
        names = inspect.signature(TrainingArguments).parameters
        sampling = ({"train_sampling_strategy": "group_by_length"}
                    if "train_sampling_strategy" in names else {"group_by_length": True})
    args = TrainingArguments(output_dir="/tmp/hpu-plugin-test-collators", max_steps=6,
                             per_device_train_batch_size=2, torch_compile=compiled,
                             report_to=[], save_strategy="no", logging_steps=1, seed=0,
                             dataloader_drop_last=True, **sampling)
    trainer = Seen(model=model, args=args, train_dataset=rows(model),
                   data_collator=collator(model), callbacks=[losses])
    trainer.seen = []
    trainer.train()
    return {"losses": losses.losses, "seen": trainer.seen,
            "wrapped": training_collator(trainer)}

compiled = train(True)
# the reference trains eagerly: unchanged code would train its blocks through graphs, with
# buckets (tests/emulation/test_training_graphs.py)
import os
os.environ["HPU_PLUGIN_FAST_TRAIN_GRAPHS"] = "0"
out = {"compiled": compiled, "plain": train(False)}
print("RESULT" + json.dumps(out))
"""

BUCKETS = (64, 128, 256)




@pytest.mark.e2e
@pytest.mark.parametrize("case", ["with_padding", "mlm", "causal_lm", "seq2seq", "prepadded"])
def test_collator_batches_land_on_buckets_with_the_unpadded_loss(run, case):
    # the batches of rows of similar length (on by default with buckets) change which rows
    # share a step: off here, so the two runs see the same rows and only padding differs
    # (tests/shapes/test_trainer.py tests the grouping itself)
    out = result_of(run(SCRIPT.replace("CASE_NAME", case), {"HPU_PLUGIN_BUCKETS_GROUP": "0"}))
    compiled, plain = out["compiled"], out["plain"]
    assert compiled["wrapped"] == "BucketingCollator", compiled["wrapped"]
    assert plain["wrapped"] != "BucketingCollator"
    for shapes in compiled["seen"]:
        for key, (_, length) in shapes.items():
            assert length in BUCKETS, (key, shapes)
    # the plain run saw lengths that are no buckets: padding did happen
    assert any(length not in BUCKETS for shapes in plain["seen"]
               for _, length in shapes.values()), plain["seen"]
    assert len(compiled["losses"]) == len(plain["losses"]) == 6
    for a, b in zip(compiled["losses"], plain["losses"], strict=True):
        assert abs(a - b) <= 1e-4 * max(1.0, abs(b)), (compiled["losses"], plain["losses"])


def test_padding_free_batches_are_left_as_they_are_and_the_advice_is_trls_own():
    """TRL's padding-free collator (``padding_free=True``, and packing's default) flattens the
    batch into one row with its boundaries beside it: padding would leave those stale, so
    the batch keeps its length, and the recompilation advice names the collator's own
    ``pad_to_multiple_of``, not a tokenizer's padding (TRL tokenizes)."""
    import torch

    trl = pytest.importorskip("trl")
    from hpu_plugin.fast_paths import trainer_buckets

    collate = trl.trainer.sft_trainer.DataCollatorForLanguageModeling(
        pad_token_id=0, padding_free=True)
    batch = collate([{"input_ids": [5, 6, 7]}, {"input_ids": [8, 9]}])
    assert batch["input_ids"].shape == torch.Size([1, 5])
    bucketing = trainer_buckets.BucketingCollator(collate, None, 0, None, causal=True)
    groups, why = bucketing.groups(batch)
    assert groups == [] and why == trainer_buckets.PADDING_FREE
    trainer = type("Trainer", (), {"args": object()})()
    advice = trainer_buckets._explainer(trainer, (64, 128))("input_ids", 1, 5, why)
    assert "pad_to_multiple_of" in advice and "padding='max_length'" not in advice, advice
