"""``Trainer(torch_compile=True)`` on the emulated Gaudi: batches padded to length buckets,
labels masked, the same losses as unpadded training."""

from __future__ import annotations

import pytest
from processes import result_of

from .conftest import LLAMA, QWEN2_VL_CONFIG, TRAINING_COLLATOR

#: The collator of the scripts below: each batch padded to its longest row, labels with -100.
COLLATE = '''
def collate(features):
    longest = max(len(f["input_ids"]) for f in features)
    def pad(key, value):
        return torch.tensor([f[key] + [value] * (longest - len(f[key])) for f in features])
    return {"input_ids": pad("input_ids", 0), "attention_mask": pad("attention_mask", 0),
            "labels": pad("labels", -100)}
'''

TRAIN = LLAMA + TRAINING_COLLATOR + """
import json, random
from torch.utils.data import Dataset
from transformers import Trainer, TrainingArguments, TrainerCallback, DataCollatorWithPadding
from transformers import DataCollatorForLanguageModeling
from habana_frameworks.torch.hpu.metrics import metric_global

class Rows(Dataset):
    def __init__(self):
        rng = random.Random(0)
        self.n = [rng.randint(3, 150) for _ in range(16)]
    def __len__(self):
        return len(self.n)
    def __getitem__(self, i):
        ids = [3 + (i * 5 + j) % 120 for j in range(self.n[i])]
        return {"input_ids": ids, "attention_mask": [1] * len(ids), "labels": ids}
""" + COLLATE + """
class Losses(TrainerCallback):
    def __init__(self):
        self.losses = []
    def on_log(self, args, state, control, logs=None, **kw):
        if logs and "loss" in logs:
            self.losses.append(logs["loss"])

losses = Losses()
args = TrainingArguments(output_dir="/tmp/hpu-plugin-test-shapes", max_steps=8,
                         per_device_train_batch_size=2, torch_compile=True, report_to=[],
                         save_strategy="no", logging_steps=1, seed=0, PAD_ARG)
trainer = Trainer(model=model.train(), args=args, train_dataset=Rows(), data_collator=COLLATOR,
                  callbacks=[losses])
trainer.train()
print("RESULT" + json.dumps({"losses": losses.losses,
      "wrapped": training_collator(trainer), "own": type(trainer.data_collator).__name__,
      "compilations": dict(metric_global("graph_compilation").stats())["TotalNumber"]}))
"""




@pytest.mark.e2e
def test_trainer_batches_are_bucketed_and_the_loss_is_unchanged(run):
    script = TRAIN.replace(", PAD_ARG", "").replace("COLLATOR", "collate")
    # rows keep the random sampler's order here, so the batches are the reference's
    bucketed = result_of(run(script, {"HPU_PLUGIN_BUCKETS_GROUP": "0"}))
    # the reference: the same training, not compiled and without the training graphs that
    # unchanged code gets (tests/emulation/test_training_graphs.py), so nothing is padded
    plain = result_of(run(script.replace("torch_compile=True", "torch_compile=False"),
                          {"HPU_PLUGIN_FAST_TRAIN_GRAPHS": "0"}))
    assert bucketed["wrapped"] == "BucketingCollator" and plain["wrapped"] == "function"
    # the Trainer's own attribute stays the user's collator: TRL checks its class
    assert bucketed["own"] == "function"
    assert len(bucketed["losses"]) == len(plain["losses"]) == 8
    for a, b in zip(bucketed["losses"], plain["losses"], strict=True):
        assert abs(a - b) <= 1e-4 * max(1.0, abs(b)), (bucketed["losses"], plain["losses"])
    # lengths 3..150 fall in the buckets 64, 128, 256: a forward and a backward graph each
    assert bucketed["compilations"] <= 2 * 3, bucketed
    assert plain["compilations"] == 0
    off = result_of(run(script.replace("max_steps=8", "max_steps=1"), {"HPU_PLUGIN_BUCKETS": "0"}))
    assert off["wrapped"] == "function"


#: Batches of one row whose lengths lie far apart: unbucketed, each is a new graph shape.
SPREAD = """
    def __init__(self):
        self.n = [4, 9, 19, 39, 79, 159, 319, 600] * 2
"""

TOKENIZER = '''
class Tok:  # the least a collator needs of a tokenizer
    padding_side = "right"
    pad_token_id = 0
    model_input_names = ["input_ids", "attention_mask"]
    def pad(self, features, **kw):
        kw.pop("padding", None)
        m = kw["pad_to_multiple_of"] or 1
        longest = -(-max(len(f["input_ids"]) for f in features) // m) * m
        out = {}
        for key, value in (("input_ids", 0), ("attention_mask", 0), ("labels", -100)):
            out[key] = torch.tensor([f[key] + [value] * (longest - len(f[key])) for f in features])
        return out
'''


def _spread(script: str) -> str:
    head, tail = script.split("    def __init__(self):\n", 1)
    tail = tail.split("\n", 2)[2]  # the original two-line body
    return (head + SPREAD.lstrip("\n") + tail).replace(
        "per_device_train_batch_size=2", "per_device_train_batch_size=1")


@pytest.mark.e2e
def test_a_users_pad_to_multiple_of_wins_and_recompiling_is_reported(run):
    script = _spread(TRAIN.replace(", PAD_ARG", "").replace(
        "COLLATOR", "DataCollatorWithPadding(Tok(), pad_to_multiple_of=8)"
    ).replace("losses = Losses()", "losses = Losses()" + TOKENIZER))
    output = run(script)
    out = result_of(output)
    assert out["wrapped"] == "DataCollatorWithPadding", out
    assert len(out["losses"]) == 8  # unbucketed compiled training runs (symbolic shapes)
    warnings = [line for line in output.splitlines() if "keeps compiling" in line]
    assert len(warnings) == 1, output[-3000:]
    assert "training with a compiled model" in warnings[0]
    assert "dimension 1 of input_ids" in warnings[0]
    assert "pad_to_multiple_of=8" in warnings[0]


@pytest.mark.e2e
def test_recompiling_with_buckets_off_names_the_switch(run):
    script = _spread(TRAIN.replace(", PAD_ARG", "").replace("COLLATOR", "collate"))
    output = run(script, {"HPU_PLUGIN_BUCKETS": "0"})
    assert result_of(output)["wrapped"] == "function"
    warnings = [line for line in output.splitlines() if "keeps compiling" in line]
    assert len(warnings) == 1, output[-3000:]
    assert "(HPU_PLUGIN_BUCKETS=0 is set): unset HPU_PLUGIN_BUCKETS" in warnings[0]
    # bucketed, the same lengths compile once per bucket and warn nothing
    bucketed = run(script)
    assert "keeps compiling" not in bucketed
    # unchanged code compiles nothing itself: the warning says whose graphs these are
    output = run(script.replace("torch_compile=True", "torch_compile=False"),
                 {"HPU_PLUGIN_BUCKETS": "0"})
    warnings = [line for line in output.splitlines() if "keeps compiling" in line]
    assert len(warnings) == 1, output[-3000:]
    assert "training through hpu-plugin's training graphs" in warnings[0], warnings
    assert "HPU_PLUGIN_FAST_TRAIN_GRAPHS=0" in warnings[0], warnings


#: A collator with a key of the user's own (per-token weights its Trainer pops), whose padding
#: value the plugin cannot know: its batches are left as they are.
OWN_KEY = _spread(TRAIN.replace(", PAD_ARG", "").replace("COLLATOR", "collate").replace(
    '"labels": pad("labels", -100)}', '"labels": pad("labels", -100), '
    '"token_weights": pad("attention_mask", 0)}').replace(
    "trainer = Trainer(", """class Weighted(Trainer):
    def compute_loss(self, model, inputs, *args, **kwargs):
        inputs.pop("token_weights")
        return super().compute_loss(model, inputs, *args, **kwargs)
trainer = Weighted("""))


@pytest.mark.e2e
def test_batches_that_cannot_be_bucketed_compile_as_without_buckets(run):
    """Left unpadded, they compile with dynamo's own dynamic shapes (as with buckets off),
    not one static graph a length, and a warning names why they were not bucketed."""
    output = run(OWN_KEY)
    off = result_of(run(OWN_KEY, {"HPU_PLUGIN_BUCKETS": "0"}))
    out = result_of(output)
    assert out["wrapped"] == "BucketingCollator", out
    assert len(out["losses"]) == 8
    assert out["compilations"] <= off["compilations"], (out, off)
    warnings = [line for line in output.splitlines() if "keeps compiling" in line]
    assert len(warnings) == 1, output[-3000:]
    assert "token_weights, whose padding value is unknown" in warnings[0], warnings


#: A multi-label classifier with the Trainer's defaults: its labels are one float row a
#: sequence, ``(batch, num_labels)``, beside token ids of varying length.
MULTI_LABEL = """
import json, random, torch
from tokenizers import Tokenizer, models
from transformers import (PreTrainedTokenizerFast, Trainer, TrainingArguments, BertConfig,
                          BertForSequenceClassification, DataCollatorWithPadding)
vocab = {"[PAD]": 0, "[UNK]": 1, **{f"w{i}": i for i in range(2, 100)}}
tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, "[UNK]")),
                              pad_token="[PAD]", unk_token="[UNK]")
torch.manual_seed(0)
model = BertForSequenceClassification(BertConfig(
    vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=4, num_labels=5, problem_type="multi_label_classification",
    pad_token_id=0, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
rng = random.Random(0)
rows = []
for i in range(16):
    n = rng.randint(3, 40)
    rows.append({"input_ids": [2 + (i * 7 + j) % 97 for j in range(n)], "attention_mask": [1] * n,
                 "labels": [float((i + k) % 2) for k in range(5)]})
seen = []
class Seen(Trainer):
    def compute_loss(self, model, inputs, *args, **kwargs):
        seen.append([list(inputs["input_ids"].shape), list(inputs["labels"].shape)])
        return super().compute_loss(model, inputs, *args, **kwargs)
args = TrainingArguments(output_dir="/tmp/hpu-plugin-test-multilabel", max_steps=6,
                         per_device_train_batch_size=4, report_to=[], save_strategy="no",
                         logging_steps=1, seed=0)
trainer = Seen(model=model, args=args, train_dataset=rows,
               data_collator=DataCollatorWithPadding(tok))
trainer.train()
print("RESULT" + json.dumps({"seen": seen, "losses": [
    e["loss"] for e in trainer.state.log_history if "loss" in e]}))
"""


@pytest.mark.e2e
def test_a_multi_label_classifiers_labels_are_not_padded_with_its_tokens(run):
    """Its token ids land on length buckets; its labels keep one row of num_labels a
    sequence (padded as a second sequence they failed BCE's shape check)."""
    on = result_of(run(MULTI_LABEL))
    off = result_of(run(MULTI_LABEL, {"HPU_PLUGIN_FAST_TRAIN_GRAPHS": "0"}))
    assert {length for (_, length), _ in on["seen"]} <= {64}, on["seen"]
    assert all(labels == [4, 5] for _, labels in on["seen"]), on["seen"]
    assert len(on["losses"]) == 6
    assert all(abs(a - b) <= 1e-4 + 1e-4 * abs(b)
               for a, b in zip(on["losses"], off["losses"], strict=True)), (on, off)


#: A mixture-of-experts model adding its routers' auxiliary loss, with the Trainer's defaults:
#: rows of 20 tokens, with or without an attention mask (``MASK``).
ROUTER_LOSS = """
import json, torch
from transformers import MixtralConfig, MixtralForCausalLM, Trainer, TrainingArguments
torch.manual_seed(0)
model = MixtralForCausalLM(MixtralConfig(
    vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
    output_router_logits=True, router_aux_loss_coef=0.5))
rows = [torch.randint(3, 127, (20,), generator=torch.Generator().manual_seed(i))
        for i in range(8)]
rows = [{"input_ids": r, "labels": r, **({"attention_mask": torch.ones_like(r)} if MASK else {})}
        for r in rows]
seen = []
class Seen(Trainer):
    def compute_loss(self, model, inputs, *args, **kwargs):
        seen.append(inputs["input_ids"].shape[1])
        return super().compute_loss(model, inputs, *args, **kwargs)
args = TrainingArguments(output_dir="/tmp/hpu-plugin-test-router-loss", max_steps=3,
                         per_device_train_batch_size=4, report_to=[], save_strategy="no",
                         logging_steps=1, seed=0)
trainer = Seen(model=model, args=args, train_dataset=rows)
trainer.train()
print("RESULT" + json.dumps({"seen": seen, "losses": [
    e["loss"] for e in trainer.state.log_history if "loss" in e]}))
"""


@pytest.mark.e2e
def test_a_router_loss_without_an_attention_mask_keeps_its_batches_lengths(run):
    """Without a mask the routers' loss counts every position, so padding would change it:
    such batches keep their length; with a mask they are padded, and the mask keeps the
    padding out of the loss."""
    bare = result_of(run(ROUTER_LOSS.replace("if MASK", "if False")))
    masked = result_of(run(ROUTER_LOSS.replace("if MASK", "if True")))
    assert set(bare["seen"]) == {20}, bare["seen"]
    assert set(masked["seen"]) != {20}, masked["seen"]  # padded to a length bucket
    assert len(bare["losses"]) == 3
    assert bare["losses"] == pytest.approx(masked["losses"], rel=1e-4), (bare, masked)


GROUPING = TRAIN.replace(", PAD_ARG", "").replace("COLLATOR", "collate").replace(
    "trainer.train()\n", """import os
def sampled(trainer):
    sampler = trainer._get_train_sampler()
    order = list(sampler)
    lengths = [Rows().n[i] for i in order]
    batches = [lengths[i:i + 2] for i in range(0, len(lengths), 2)]
    return {"sampler": type(sampler).__name__, "order": sorted(order),
            "padding": sum(2 * max(b) - sum(b) for b in batches) / sum(lengths)}
grouped = sampled(trainer)
os.environ["HPU_PLUGIN_BUCKETS_GROUP"] = "0"
kept = sampled(Trainer(model=model, args=args, train_dataset=Rows(), data_collator=collate))
print("RESULT" + json.dumps({"grouped": grouped, "kept": kept}))
raise SystemExit(0)
""")


@pytest.mark.e2e
def test_bucketed_training_batches_rows_of_similar_length(run):
    result = result_of(run(GROUPING))
    grouped, kept = result["grouped"], result["kept"]
    assert grouped["sampler"] == "BucketGroupedSampler"
    assert grouped["order"] == list(range(16))  # every row once an epoch
    assert kept["sampler"] == "RandomSampler" and kept["order"] == list(range(16))
    # padding to the longest row of a batch: rows of similar length need much less of it
    assert grouped["padding"] < kept["padding"] / 3, (grouped, kept)


PADDING_FREE = LLAMA + """
import json, random
from transformers import DataCollatorWithFlattening, Trainer, TrainingArguments
rng = random.Random(0)
rows = [{"input_ids": list(range(3, 3 + rng.randint(2, 90)))} for _ in range(40)]
args = TrainingArguments(output_dir="/tmp/hpu-plugin-test-padding-free", report_to=[],
                         per_device_train_batch_size=4, torch_compile=True, seed=0)
samplers = {}
for seq_idx in (False, True):
    trainer = Trainer(model=model, args=args, train_dataset=rows,
                      data_collator=DataCollatorWithFlattening(return_seq_idx=seq_idx))
    samplers[str(seq_idx)] = type(trainer._get_train_sampler()).__name__
print("RESULT" + json.dumps(samplers))
"""


@pytest.mark.e2e
def test_padding_free_batches_keep_the_users_order(run):
    """Flattened batches with their boundaries in ``seq_idx`` (TRL's packing, padding-free)
    are never padded to buckets, so their rows are not grouped either: the order, and so
    each step's loss, stays the user's. Flattened with position ids only, they are bucketed
    and grouped."""
    assert result_of(run(PADDING_FREE)) == {"False": "BucketGroupedSampler",
                                            "True": "RandomSampler"}


SEEDED = LLAMA + """
import json, random
from transformers import Trainer, TrainingArguments
rng = random.Random(0)
rows = [{"input_ids": list(range(3, 3 + rng.randint(2, 90)))} for _ in range(400)]

def order(data_seed, epochs=1):
    args = TrainingArguments(output_dir="/tmp/hpu-plugin-test-seeded", report_to=[],
                             per_device_train_batch_size=2, torch_compile=True, seed=0,
                             data_seed=data_seed)
    sampler = Trainer(model=model, args=args, train_dataset=rows)._get_train_sampler()
    return type(sampler).__name__, [list(sampler) for _ in range(epochs)]

name, (one,) = order(1)
_, (two,) = order(2)
_, again = order(1, epochs=2)
print("RESULT" + json.dumps({"sampler": name, "seeds_differ": one != two,
                             "same_seed_same_order": again[0] == one,
                             "next_epoch_differs": again[1] != one}))
"""


@pytest.mark.e2e
def test_grouped_rows_follow_the_users_data_seed(run):
    """The grouped order is drawn as Accelerate's seedable sampler draws it: from the
    user's data_seed, a new order each epoch, the same one for the same seed."""
    assert result_of(run(SEEDED)) == {"sampler": "BucketGroupedSampler", "seeds_differ": True,
                                      "same_seed_same_order": True, "next_epoch_differs": True}


#: An uncompiled model (the training graphs' default): training batches are bucketed, while
#: predictions keep the lengths Transformers gives them (padded to the longest batch only).
PREDICT = LLAMA + TRAINING_COLLATOR + """
import json, logging
import transformers
from torch.utils.data import Dataset
from transformers import Trainer, TrainingArguments

class Rows(Dataset):
    def __init__(self, lengths):
        self.n = lengths
    def __len__(self):
        return len(self.n)
    def __getitem__(self, i):
        ids = [3 + (i * 5 + j) % 120 for j in range(self.n[i])]
        return {"input_ids": ids, "attention_mask": [1] * len(ids), "labels": ids}
""" + COLLATE + """
said = []
class Said(logging.Handler):
    def emit(self, record):
        said.append(record.getMessage())
logging.getLogger("transformers").addHandler(Said())
transformers.logging.set_verbosity_warning()
args = TrainingArguments(output_dir="/tmp/hpu-plugin-test-predict", max_steps=2,
                         per_device_train_batch_size=2, per_device_eval_batch_size=2,
                         report_to=[], save_strategy="no", seed=0)
trainer = Trainer(model=model.train(), args=args, train_dataset=Rows([5, 9, 7, 11]),
                  data_collator=collate)
trainer.train()
out = trainer.predict(Rows([5, 9, 7, 23]))
print("RESULT" + json.dumps({"wrapped": training_collator(trainer),
      "predictions": list(out.predictions.shape), "labels": list(out.label_ids.shape),
      "deprecated": [m for m in said if "deprecated" in m]}))
"""


@pytest.mark.e2e
def test_predictions_of_an_uncompiled_model_keep_their_lengths(run):
    got = result_of(run(PREDICT))
    assert got["deprecated"] == []  # nothing the user did is named deprecated
    assert got["wrapped"] == "BucketingCollator"  # training batches: the graphs' buckets
    assert got["predictions"] == [4, 23, 128] and got["labels"] == [4, 23]


#: Heads that read padded positions, and NEFTune, whose noise scales with the length: their
#: batches keep their lengths, so the losses are the unpadded ones.
HEADS = TRAINING_COLLATOR + """
import json, sys, torch
from torch.utils.data import Dataset
from transformers import (LlamaConfig, LlamaForCausalLM, LlamaForQuestionAnswering,
                          LlamaForSequenceClassification, Trainer, TrainerCallback,
                          TrainingArguments)

kind = sys.argv[1]
torch.manual_seed(0)
config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, num_labels=2,
                     pad_token_id=None if kind == "classify" else 0)
cls = {"qa": LlamaForQuestionAnswering, "classify": LlamaForSequenceClassification,
       "neftune": LlamaForCausalLM}[kind]
model = cls(config)

class Rows(Dataset):
    def __len__(self):
        return 8
    def __getitem__(self, i):
        ids = torch.tensor([3 + (i * 5 + j) % 60 for j in range(8)])
        if kind == "qa":
            return {"input_ids": ids, "start_positions": torch.tensor(i % 8),
                    "end_positions": torch.tensor(7)}
        if kind == "classify":
            return {"input_ids": ids, "labels": torch.tensor(i % 2)}
        return {"input_ids": ids, "attention_mask": torch.ones(8, dtype=torch.long),
                "labels": ids}

class Losses(TrainerCallback):
    losses = []
    def on_log(self, args, state, control, logs=None, **kw):
        if logs and "loss" in logs:
            self.losses.append(logs["loss"])

args = TrainingArguments(output_dir="/tmp/hpu-plugin-test-heads", max_steps=3, report_to=[],
                         per_device_train_batch_size=1 if kind == "classify" else 4,
                         save_strategy="no", logging_steps=1, seed=0,
                         neftune_noise_alpha=5.0 if kind == "neftune" else None)
trainer = Trainer(model=model, args=args, train_dataset=Rows(), callbacks=[Losses()])
trainer.train()
print("RESULT" + json.dumps({"losses": Losses.losses,
                             "wrapped": training_collator(trainer)}))
"""


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["qa", "classify", "neftune"])
def test_heads_that_read_padded_positions_train_on_their_own_lengths(run, kind):
    """Question answering takes its softmax over every position (its 'no answer' index is the
    length), sequence classification without a pad token pools the last position, NEFTune
    scales its noise by the length: padding would change each loss."""
    script = HEADS.replace("kind = sys.argv[1]", f"kind = {kind!r}")
    default = result_of(run(script))
    plain = result_of(run(script, {"HPU_PLUGIN_BUCKETS": "0"}))
    assert default["wrapped"] != "BucketingCollator", default
    assert default["losses"] == pytest.approx(plain["losses"], rel=1e-4), (default, plain)


QWEN2_VL = """
import json, random
import torch
import transformers as T
torch.manual_seed(0)
""" + QWEN2_VL_CONFIG + """
model = T.Qwen2VLForConditionalGeneration(config)
rng = random.Random(0)
rows = []
for i in range(8):  # an image of 4 x 4 patches (4 tokens), then text of its own length
    text = [rng.randint(2, 140) for _ in range(rng.randint(3, 40))]
    ids = [1, 152, 150, 150, 150, 150, 153] + text
    rows.append({"input_ids": ids, "pixel_values": torch.randn(16, 24),
                 "image_grid_thw": torch.tensor([1, 4, 4])})

def collate(features):  # as a processor pads a batch: to its longest row
    longest = max(len(f["input_ids"]) for f in features)
    ids = torch.tensor([f["input_ids"] + [0] * (longest - len(f["input_ids"])) for f in features])
    mask = (torch.arange(longest) < torch.tensor([[len(f["input_ids"])] for f in features])).long()
    return {"input_ids": ids, "attention_mask": mask, "mm_token_type_ids": (ids == 150).long(),
            "labels": ids.masked_fill((mask == 0) | (ids >= 150), -100),
            "pixel_values": torch.cat([f["pixel_values"] for f in features]),
            "image_grid_thw": torch.stack([f["image_grid_thw"] for f in features])}

class Seen(T.Trainer):
    def compute_loss(self, model, inputs, *args, **kwargs):
        self.seen.append(inputs["input_ids"].shape[1])
        return super().compute_loss(model, inputs, *args, **kwargs)

args = T.TrainingArguments(output_dir="/tmp/hpu-plugin-test-qwen2-vl", max_steps=4,
                           per_device_train_batch_size=2, report_to=[], save_strategy="no",
                           logging_steps=1, seed=0)
trainer = Seen(model=model, args=args, train_dataset=rows, data_collator=collate)
trainer.seen = []
trainer.train()
losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
print("RESULT" + json.dumps({"losses": losses, "seen": trainer.seen}))
"""


@pytest.mark.e2e
def test_a_processors_token_types_are_padded_with_the_batch(run):
    """Qwen2-VL needs ``mm_token_type_ids``, a value per token (0 for text), beside its
    prompt: its training batches land on buckets (padded as text, under the mask) with the
    unpadded losses."""
    bucketed = result_of(run(QWEN2_VL, {"HPU_PLUGIN_BUCKETS_GROUP": "0"}))
    plain = result_of(run(QWEN2_VL, {"HPU_PLUGIN_BUCKETS": "0"}))
    assert set(bucketed["seen"]) == {64}, bucketed
    assert set(plain["seen"]) != {64}, plain
    assert bucketed["losses"] == pytest.approx(plain["losses"], rel=1e-4), (bucketed, plain)
