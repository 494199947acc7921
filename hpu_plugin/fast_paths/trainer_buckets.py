"""Transformers ``Trainer``: batch lengths bucketed for compiled models on Gaudi, and a
warning when compiled training keeps compiling new shapes.

Each new input shape of a compiled graph is a graph compilation on Gaudi (forward and
backward). A collator pads a batch to its longest row, so the padded length varies from batch
to batch whatever the sampler (random, or ``group_by_length``) does; ``pad_to_multiple_of``
only narrows it to multiples. The collator the ``Trainer`` builds its dataloaders with is
wrapped at the end of ``Trainer.__init__``: each batch is right-padded to a length bucket,
ids with the pad token, masks with 0 and labels with -100, so that the loss, and the token
count ``num_items_in_batch`` that scales it, are those of the unpadded batch. The decoder
side of a sequence-to-sequence batch (``labels``, ``decoder_*``) gets its own bucket.

Padding to the longest row of a random batch costs about a third of the real tokens before
any bucket; while batches are bucketed, the default random sampler batches rows of similar
length (``BucketGroupedSampler``, as ``group_by_length`` does; ``HPU_PLUGIN_BUCKETS_GROUP=0``
keeps the random batches).

The user's choice wins: a collator with ``pad_to_multiple_of`` or ``padding="max_length"``
decides its lengths; ``HPU_PLUGIN_BUCKETS=0`` (or ``_LENGTH=0``) turns bucketing off. In every
case where the model is compiled for Gaudi the steps are watched with Gaudi's own
``graph_compilation`` metric, and a process that keeps compiling new shapes is told once which
dimension varies and which setting fixes it.
"""

from __future__ import annotations

import functools
import logging
import os
import types
from collections.abc import Callable
from typing import Any

from hpu_plugin import importhook, settings
from hpu_plugin.fast_paths import training_graphs
from hpu_plugin.fast_paths.decisions import buckets, buckets_off_by
from hpu_plugin.fast_paths.generate_buckets import (
    DEVICE_TYPE,
    HOST,
    SWITCH,
    WARN_AFTER,
    compilations,
    is_compiled,
    max_positions,
    static_graphs,
)
from hpu_plugin.gaudi import tuning
from hpu_plugin.gaudi.shape_buckets import bucket_for
from hpu_plugin.hosts.replacing import original_of
from hpu_plugin.patching import Patches, is_ours, ours
from hpu_plugin.registry import Registry
from hpu_plugin.reporting import say_once

log = logging.getLogger("hpu_plugin")

#: Value each padded key of a training batch gets (right padding; ids get the pad token).
PAD_VALUES: dict[str, int | None] = {
    "input_ids": None, "attention_mask": 0, "labels": -100, "token_type_ids": 0,
    "position_ids": 0, "special_tokens_mask": 1, "decoder_input_ids": None,
    "decoder_attention_mask": 0,
    # which tokens are text (0), image or video: Qwen2-VL's and its kin's processors
    "mm_token_type_ids": 0, "moe_mm_token_type_ids": 0,
    # TRL's: which tokens the loss counts (DPO, SFT's completion-only and assistant-only loss)
    "completion_mask": 0, "assistant_masks": 0,
}
#: The keys of the decoder side of a sequence-to-sequence batch, which has its own length.
DECODER_KEYS = ("labels", "decoder_input_ids", "decoder_attention_mask")
#: Why a padding-free batch (every sequence flattened into one row, with the sequence
#: boundaries beside it: TRL's ``padding_free`` and packing) is left as it is: padding would
#: leave its boundaries stale, and TRL counts the padding as tokens seen.
PADDING_FREE = ("the batches are padding-free (every sequence flattened into one row, with "
                "its boundaries in seq_idx or cu_seq_lens)")
#: Collator ``padding`` values that fix every batch's length (the user's shapes).
FIXED_PADDING = ("max_length", "do_not_pad", False)


def _user_choice(collator: Any) -> str | None:
    """The collator setting by which the user decided the batch lengths, if any."""
    multiple = getattr(collator, "pad_to_multiple_of", None)
    if multiple is not None:
        return f"pad_to_multiple_of={multiple!r}"
    padding = getattr(collator, "padding", True)
    padding = getattr(padding, "value", padding)  # transformers' PaddingStrategy
    if padding in FIXED_PADDING:
        return f"padding={padding!r}"
    return None


#: Model heads whose loss reads only the positions a label names, so that right padding with
#: labels of -100 leaves the loss as it was. Others read every position (question answering:
#: the softmax over positions, and its "no answer" index is the length), so their batches
#: keep their lengths. Sequence classification pools the first token or the last one that is
#: not the config's pad token: padded with that token, it reads what it read before.
PADDABLE_HEADS = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration", "ForMaskedLM",
                  "ForTokenClassification")


def _head(model: Any) -> str:
    """The class name of the Transformers model under a compiled module or a PEFT wrapper."""
    for _ in range(4):
        inner = getattr(model, "_orig_mod", None)
        if inner is None and callable(getattr(model, "get_base_model", None)):
            inner = model.get_base_model()
        if inner is None or inner is model:
            break
        model = inner
    return type(model).__name__


def _is_causal_lm(model: Any) -> bool:
    """Right padding without an attention mask is safe only where attention is causal."""
    return _head(model).endswith(("ForCausalLM", "LMHeadModel"))


def _router_loss(model: Any) -> bool:
    """Does the model add its routers' auxiliary loss? Without an attention mask that loss
    counts every position, padding included (``load_balancing_loss_func``)."""
    return bool(getattr(getattr(model, "config", None), "output_router_logits", False))


def _padding_changes_training(trainer: Any) -> str | None:
    """Why padding this Trainer's batches would change what it trains, or None."""
    head = _head(trainer.model)
    if head.endswith("ForSequenceClassification"):
        pad = getattr(getattr(trainer.model, "config", None), "pad_token_id", None)
        if pad is None or pad != _trainer_pad_token(trainer):
            return (f"the model's head ({head}) pools the last token, and the config's "
                    "pad_token_id does not mark the padding")
    elif not head.endswith(PADDABLE_HEADS):
        return f"the model's head ({head}) reads padded positions"
    if getattr(trainer.args, "neftune_noise_alpha", None):
        return "NEFTune's noise (neftune_noise_alpha) scales with the padded length"
    return None


class BucketingCollator:
    """The user's collator, its batches right-padded to length buckets (labels -100).

    Right padding after every real token changes no loss: the attention mask (or the causal
    mask of a decoder) keeps real tokens from seeing it, and -100 labels leave it out of the
    loss and of ``num_items_in_batch``.
    """

    def __init__(self, inner: Callable[..., Any], registry: Registry, pad_token: int,
                 limit: int | None, causal: bool, sequence_labels: bool = False,
                 router_loss: bool = False) -> None:
        self.inner = inner
        self.registry = registry
        self.pad_token = pad_token
        self.limit = limit
        self.causal = causal
        self.router_loss = router_loss
        #: A sequence classifier's labels are one row a sequence (a multi-label classifier's
        #: ``(batch, num_labels)``), never padded with its tokens.
        self.sequence_labels = sequence_labels

    def __getattr__(self, name: str) -> Any:  # the collator's own settings stay visible
        return getattr(self.inner, name)

    def __call__(self, features: Any) -> Any:
        batch = self.inner(features)
        groups, why = self.groups(batch)
        if why is not None:
            say_once("bucket-refused", logging.INFO,
                     "hpu_plugin: training batches are not bucketed: %s.", why)
        sizes = buckets(self.registry, "length", self.limit) if groups else ()
        for length, keys in groups:
            target = bucket_for(length, sizes)
            if target != length:
                self._pad(batch, keys, length, target)
        return batch

    def groups(self, batch: Any) -> tuple[list[tuple[int, list[str]]], str | None]:
        """The keys padded together (the input side, and a decoder side of its own length),
        or none and why such a batch is not padded."""
        import torch

        ids = batch.get("input_ids") if hasattr(batch, "get") else None
        if getattr(ids, "ndim", 0) != 2:
            return [], "the batches carry no input_ids of shape (batch, length)"
        length = int(ids.shape[1])
        sequences = {k: int(v.shape[1]) for k, v in batch.items()
                     if isinstance(v, torch.Tensor) and v.ndim == 2
                     and not (k == "labels" and self.sequence_labels)}
        inputs = [k for k, n in sequences.items() if n == length]
        decoder = [k for k in DECODER_KEYS if k in sequences and sequences[k] != length]
        decoder_length = sequences[decoder[0]] if decoder else None
        decoder = [k for k in decoder if sequences[k] == decoder_length]
        if "seq_idx" in batch or "cu_seq_lens_q" in batch:
            return [], PADDING_FREE
        unknown = [k for k in inputs + decoder if k not in PAD_VALUES]
        if unknown:
            return [], ("the collator returns " + ", ".join(unknown) +
                        ", whose padding value is unknown")
        if "attention_mask" not in inputs and not self.causal:
            return [], ("the batches have no attention_mask, and the model's attention is "
                        "not known to be causal")
        if "attention_mask" not in inputs and self.router_loss:
            return [], ("the batches have no attention_mask, and the model's router loss "
                        "(output_router_logits) counts every position")
        groups = [(length, inputs)]
        if decoder_length is not None:
            groups.append((decoder_length, decoder))
        return groups, None

    def _pad(self, batch: Any, keys: list[str], length: int, target: int) -> None:
        import torch

        for key in keys:
            value = PAD_VALUES[key]
            fill = self.pad_token if value is None else value
            tensor = batch[key]
            pad = tensor.new_full((tensor.shape[0], target - length), fill)
            batch[key] = torch.cat([tensor, pad], dim=1)


# -- grouping rows of similar length -----------------------------------------------------------

#: Rows drawn together before they are sorted by length and cut into batches (Transformers'
#: ``LengthGroupedSampler`` uses up to 50 batches).
MEGABATCH = 50
GROUP_SWITCH = tuning.BUCKETS_GROUP


class BucketGroupedSampler:
    """The random sampler's rows, drawn in megabatches and sorted by length inside each.

    A batch is padded to its longest row and then to a bucket; with rows drawn at random the
    first padding alone costs about a third of the real tokens at batch 2. Batching rows of
    similar length, as ``group_by_length`` does, leaves mostly the bucket's padding. Lengths
    are read as the megabatch is drawn (a dataset's length column when it has one), so
    nothing reads the whole dataset up front.
    """

    def __init__(self, dataset: Any, batch_size: int, name: str, column: list[int] | None,
                 seed: int | None = None) -> None:
        self.dataset = dataset
        self.batch_size = max(1, batch_size)
        self.name = name
        self.column = column
        #: The order's seed, epoch added, as Accelerate's seedable sampler has it (the
        #: ``data_seed`` the user set, else torch's initial seed); ``None``: drawn from torch's
        #: global generator each epoch, as a plain random sampler does.
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.dataset)

    def _length(self, index: int) -> int:
        if self.column is not None:
            return int(self.column[index])
        row = self.dataset[index]
        return len(row[self.name]) if hasattr(row, "__getitem__") and self.name in row else 0

    def __iter__(self) -> Any:
        import torch

        if self.seed is None:
            seed = int(torch.empty((), dtype=torch.int64).random_().item())
        else:
            seed = self.seed + self.epoch
        generator = torch.Generator().manual_seed(seed)
        order = torch.randperm(len(self.dataset), generator=generator).tolist()
        size = self.batch_size * MEGABATCH
        for start in range(0, len(order), size):
            mega = order[start:start + size]
            lengths = {i: self._length(i) for i in mega}
            yield from sorted(mega, key=lengths.__getitem__, reverse=True)
        if self.seed is not None:
            self.epoch += 1


def _grouping_on() -> bool:
    return tuning.group_rows(os.environ)


def _length_column(trainer: Any, dataset: Any) -> list[int] | None:
    name = getattr(trainer.args, "length_column_name", "length")
    names = getattr(dataset, "column_names", None)
    return list(dataset[name]) if names and name in names else None


def _seed(trainer: Any) -> int | None:
    """The seed Accelerate's seedable sampler would order the rows by (the user's
    ``data_seed``, else torch's initial seed), or ``None`` where it would not be used."""
    import torch

    config = getattr(getattr(trainer, "accelerator", None), "dataloader_config", None)
    if not getattr(config, "use_seedable_sampler", False):
        return None
    data_seed = getattr(config, "data_seed", None)
    return int(data_seed) if data_seed is not None else torch.random.initial_seed()


def group_rows(patches: Patches, trainer: Any, bucketing: BucketingCollator) -> None:
    """Make the Trainer's default random sampler batch rows of similar length.

    Only the default: a sampler the user chose (``group_by_length``, sequential, their own
    ``_get_train_sampler``) is kept, and so is a dataset without ``__len__``, and so is the
    order of a collator whose batches are padding-free (TRL's packing): the buckets never
    pad them, so grouping would change the losses of each step for nothing.
    """
    original = getattr(trainer, "_get_train_sampler", None)
    if original is None or is_ours(original) or not _grouping_on():
        return

    @functools.wraps(original)
    def _get_train_sampler(*args: Any, **kwargs: Any) -> Any:
        from torch.utils.data import RandomSampler

        sampler = original(*args, **kwargs)
        if type(sampler) is not RandomSampler or getattr(sampler, "generator", None) is not None:
            return sampler
        dataset = sampler.data_source
        try:
            first = dataset[0]
        except Exception:
            return sampler
        processor = getattr(trainer, "processing_class", None)
        name = (getattr(processor, "model_input_names", None) or ["input_ids"])[0]
        column = _length_column(trainer, dataset)
        if column is None and not (hasattr(first, "keys") and name in first):
            return sampler
        batch = trainer.args.train_batch_size * trainer.args.gradient_accumulation_steps
        if _padding_free(trainer, bucketing, dataset, trainer.args.train_batch_size):
            return sampler
        return BucketGroupedSampler(dataset, batch, name, column, _seed(trainer))

    patches.set_on_instance(trainer, "_get_train_sampler", ours(_get_train_sampler))


def _padding_free(trainer: Any, bucketing: BucketingCollator, dataset: Any, rows: int) -> bool:
    """Does the collator make the dataset's first rows one padding-free batch? Asked as the
    Trainer calls it (unused columns removed), with the random state put back afterwards (a
    collator may draw: MLM masking). A collator that fails here is taken to pad."""
    import torch

    collate = bucketing.inner
    removed = getattr(trainer, "_get_collator_with_removed_columns", None)
    try:
        with torch.random.fork_rng(devices=[]):
            if callable(removed):
                collate = removed(collate, description="training")
            batch = collate([dataset[i] for i in range(min(rows, len(dataset)))])
        return bucketing.groups(batch)[1] == PADDING_FREE
    except Exception:
        return False


# -- the recompilation warning --------------------------------------------------------------


def _shapes(inputs: Any) -> dict[str, tuple[int, ...]]:
    if not hasattr(inputs, "items"):
        return {}
    return {k: tuple(int(n) for n in v.shape) for k, v in inputs.items()
            if hasattr(v, "shape") and hasattr(v, "ndim") and v.ndim}


class StepWatch:
    """Notices compiled steps that keep compiling as an input dimension varies; warns once.

    The first compiling step is the warm-up. After it, a step whose inputs differ from the
    first step's in a dimension the ``explain`` callback does not expect (it returns the fix)
    and that compiled (Gaudi's ``graph_compilation`` grew) counts; at ``WARN_AFTER`` such
    steps with distinct shapes, one line names the dimension, the sizes seen and the fix.
    """

    def __init__(self, where: str,
                 explain: Callable[[str, int, int, str | None], str | None]) -> None:
        self.where = where
        self.explain = explain
        self.first: dict[str, tuple[int, ...]] | None = None
        self.seen: set[tuple[tuple[str, tuple[int, ...]], ...]] = set()
        self.sizes: dict[tuple[str, int], list[int]] = {}

    def observe(self, before: int | None, inputs: Any, unbucketed: str | None) -> None:
        """After a step: ``unbucketed`` says why its batch was not bucketed, or None."""
        after = compilations()
        if before is None or after is None or after <= before:
            return
        shapes = _shapes(inputs)
        if self.first is None:
            self.first = shapes
            return
        varying = [(key, dim, shape[dim]) for key, shape in shapes.items()
                   for dim in range(len(shape))
                   if key in self.first and len(self.first[key]) == len(shape)
                   and shape[dim] != self.first[key][dim]]
        fixes = [(key, dim, size, self.explain(key, dim, size, unbucketed))
                 for key, dim, size in varying]
        fixes = [f for f in fixes if f[3] is not None]
        signature = tuple(sorted(shapes.items()))
        if not fixes or signature in self.seen:
            return
        self.seen.add(signature)
        key, dim, _, fix = fixes[0]
        sizes = self.sizes.setdefault((key, dim), [self.first[key][dim]])
        sizes.extend(s for k, d, s, _ in fixes if (k, d) == (key, dim) and s not in sizes)
        if len(self.seen) >= WARN_AFTER:
            say_once(
                f"recompiling:{self.where}", logging.WARNING,
                "hpu_plugin: %s keeps compiling new graphs (%d so far) as "
                "dimension %d of %s varies (%s); %s", self.where, after, dim, key,
                ", ".join(map(str, sizes[:6])), fix,
            )


def _explainer(trainer: Any, sizes: tuple[int, ...]
               ) -> Callable[[str, int, int, str | None], str | None]:
    """What fixes a varying dimension of a training batch (None: it is a bucket), given why
    the batch was not bucketed (None: it was)."""

    def explain(key: str, dim: int, size: int, why_unbucketed: str | None) -> str | None:
        if dim == 0:
            if getattr(trainer.args, "auto_find_batch_size", False):
                return None  # it shrinks the batch after running out of memory: expected
            if getattr(trainer.args, "dataloader_drop_last", False):
                return "keep the batch size fixed (it is the batch dimension)."
            return ("the last batch of an epoch is smaller: set "
                    "TrainingArguments(dataloader_drop_last=True).")
        if why_unbucketed is None:
            if size in sizes:
                return None  # a bucket's first use: expected
            return (f"lengths above the last bucket ({sizes[-1] if sizes else 0}) are not "
                    f"padded: add larger buckets with {SWITCH}_LENGTH.")
        if SWITCH in why_unbucketed:
            name = why_unbucketed.split("=")[0]
            return f"shape buckets are off ({why_unbucketed}): unset {name} to bucket lengths."
        if why_unbucketed == PADDING_FREE:
            return (f"lengths are left as they are because {why_unbucketed}: let the collator "
                    "pad the row to a multiple (TRL: SFTConfig(pad_to_multiple_of=...)) to "
                    "compile a few lengths.")
        if "hook" in why_unbucketed:
            return f"{why_unbucketed}: see hpu-plugin info for the plugin that answered."
        if not why_unbucketed.startswith(("padding=", "pad_to_multiple_of=", "no collator")):
            return (f"lengths are left as they are because {why_unbucketed}: pad to a few "
                    "lengths yourself (your tokenizer's or feature extractor's "
                    "padding='max_length') to compile once.")
        return (f"your collator's {why_unbucketed} decides the lengths: remove it to let "
                "hpu-plugin pad batches to a few length buckets, or pad to a few lengths "
                "yourself (padding='max_length').")

    return explain


def _watched(step: Callable[..., Any], watch: StepWatch,
             unbucketed: Callable[[Any], str | None]) -> Callable[..., Any]:
    """``step`` watched for recompilations. A step whose batch is bucketed runs in static
    graphs (one a bucket); one whose batch was left as it was (``unbucketed(batch)`` says
    why) compiles as dynamo would without buckets, not one static graph a length."""

    @functools.wraps(step)
    def run(model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        before, why = compilations(), unbucketed(inputs)
        try:
            if why is not None:
                return step(model, inputs, *args, **kwargs)
            with static_graphs():
                return step(model, inputs, *args, **kwargs)
        finally:
            watch.observe(before, inputs, why)

    return ours(run)


# -- installing -----------------------------------------------------------------------------


def _trainer_pad_token(trainer: Any) -> int:
    # processing_class only: Transformers 4's ``tokenizer`` property warns that it is
    # deprecated, which would blame the user for the plugin's look-up
    tokenizer = getattr(trainer, "processing_class", None)
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
    for value in (getattr(tokenizer, "pad_token_id", None),
                  getattr(getattr(trainer.model, "config", None), "pad_token_id", None)):
        if isinstance(value, int):
            return value
    return 0


def _bucket_collator(registry: Registry, trainer: Any
                     ) -> tuple[BucketingCollator | None, str | None, tuple[int, ...]]:
    """The user's collator wrapped to pad to buckets, or None and why, and the buckets."""
    limit = max_positions(trainer.model)
    sizes = buckets(registry, "length", limit)
    collator = trainer.data_collator
    choice = _user_choice(collator) if collator is not None else "no collator"
    if choice is not None:
        return None, choice, sizes
    changes = _padding_changes_training(trainer)
    if changes is not None:
        say_once("bucket-refused", logging.INFO,
                 "hpu_plugin: training batches are not bucketed: %s.", changes)
        return None, changes, sizes
    if not sizes:
        why = buckets_off_by("length")
        return None, why or "the hpu_shape_buckets hook returned no length buckets", sizes
    return BucketingCollator(
        collator, registry, _trainer_pad_token(trainer), limit, _is_causal_lm(trainer.model),
        _head(trainer.model).endswith("ForSequenceClassification"),
        _router_loss(trainer.model)), None, sizes


def _with_collator(build: Callable[..., Any], trainer: Any,
                   bucketing: BucketingCollator) -> Callable[..., Any]:
    """``build`` (a Trainer's dataloader method) with ``bucketing`` as its collator. Only
    while the dataloader is built: everywhere else ``trainer.data_collator`` stays the
    user's own object (TRL checks its class before evaluating). A collator the user set on
    the Trainer since is theirs, used as it is."""

    @functools.wraps(build)
    def with_collator(*args: Any, **kwargs: Any) -> Any:
        own = trainer.data_collator
        if own is not bucketing.inner:
            return build(*args, **kwargs)
        trainer.data_collator = bucketing
        try:
            return build(*args, **kwargs)
        finally:
            trainer.data_collator = own

    return ours(with_collator)


def bucket_trainer(registry: Registry, patches: Patches, trainer: Any) -> None:
    """For a model compiled for Gaudi: bucket the collator's batches where the user left the
    padding to us, and watch every step for recompilations (each change to the Trainer
    through ``patches``)."""
    args = trainer.args
    by_user = getattr(args, "torch_compile", False) or is_compiled(trainer.model)
    compiled = by_user or training_graphs.wanted(
        registry, getattr(trainer, "accelerator", None), trainer.model)
    if not compiled or getattr(args.device, "type", None) != DEVICE_TYPE:
        return
    if is_ours(getattr(trainer, "get_train_dataloader", None)):
        return  # bucketed already
    bucketing, why, sizes = _bucket_collator(registry, trainer)
    if bucketing is not None:
        # the training graphs keep eager's results: evaluation and predictions keep the
        # lengths of their own batches (Trainer pads predictions to the longest batch only);
        # a model the user compiled gets the buckets there too
        builds = ["get_train_dataloader"]
        if by_user:
            builds += ["get_eval_dataloader", "get_test_dataloader"]
        for name in builds:
            build = getattr(trainer, name, None)
            if callable(build):
                patches.set_on_instance(trainer, name, _with_collator(build, trainer, bucketing))
    # grouping rows changes the order of the batches, so the losses of each step: only for
    # a model the user compiled, or when asked for (the training graphs keep eager's losses)
    if (bucketing is not None and why is None
            and (by_user or os.environ.get(tuning.BUCKETS_GROUP, "").strip())):
        group_rows(patches, trainer, bucketing)

    def unbucketed(batch: Any) -> str | None:
        if bucketing is None:
            return why
        if trainer.data_collator is not bucketing.inner:  # the dataloader used it as it is
            return "the Trainer's data_collator was set after the Trainer was built"
        return bucketing.groups(batch)[1]

    explain = _explainer(trainer, sizes)
    # the user who compiled nothing is told whose graphs these are
    graphs = ("with a compiled model",) * 2 if by_user else (
        "through hpu-plugin's training graphs (HPU_PLUGIN_FAST_TRAIN_GRAPHS=0 turns them off)",
        "through hpu-plugin's graphs")
    for name, where in (("training_step", f"training {graphs[0]}"),
                        ("prediction_step", f"evaluation {graphs[1]}")):
        step = getattr(trainer, name, None)
        if callable(step) and not is_ours(step):
            patches.set_on_instance(trainer, name,
                                    _watched(step, StepWatch(where, explain), unbucketed))


def install_trainer(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    cls = getattr(module, "Trainer", None)
    original = original_of(cls, "__init__", HOST, "shape buckets", "Trainer.__init__", own=True)
    if original is None:
        return

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        try:
            bucket_trainer(registry, patches, self)
        except settings.SettingError:
            raise  # a bad value of a setting: the user's to fix, before training starts
        except Exception as exc:  # bucketing is an optimisation: never break the Trainer
            say_once("bucket-trainer-failed", logging.WARNING,
                     "hpu_plugin: training batches are not bucketed: %r", exc)

    patches.set(cls, "__init__", ours(__init__))


def install(registry: Registry, patches: Patches) -> None:
    """Register the post-import hook of ``Trainer`` (only with a device ready)."""
    importhook.when_imported(
        "transformers.trainer", lambda module: install_trainer(registry, patches, module)
    )
