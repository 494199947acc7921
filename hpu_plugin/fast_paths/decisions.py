"""Gaudi's fast paths for unchanged code, and the one place that says whether each is on.

In eager mode every op is a launch of its own on Gaudi; the speed Gaudi users got from
optimum-habana came from fused kernels (AdamW, clip-norm, SDPA, RMSNorm, rotary embeddings)
and from graphs for inference, each a single launch where the ordinary path makes many.
:data:`FAST_PATHS` says what each replaces and what turning it off costs (``hpu-plugin info``
and the docs read it).

Every feature of this layer asks :func:`take` whether to take its path; :func:`take` asks
the registry's ``hpu_fast_path`` hook, so that a third party can answer first, and this
module's own implementation of the hook (the first-party ``fast_paths`` plugin, registered
by entry point like a third party's) answers from the settings. Each fast path gives the
ordinary path's results (a feature takes it only where it does), so on Gaudi each is on by
default. ``HPU_PLUGIN_FAST=0`` turns every one off; ``HPU_PLUGIN_FAST_<NAME>``
(``_OPTIMIZER``, ``_CLIP_NORM``, ``_SDPA``, ``_RMS_NORM``, ``_ROPE``, ``_MOE``,
``_MASKS``, ``_GRAPHS``, ``_TRAIN_GRAPHS``, ``_LOSS``, ``_BUCKET_VIEWS``) turns one
off (``0``) or on (``1``) whatever the first says. The shape buckets are asked here too
(:func:`buckets`, the registry's ``hpu_shape_buckets``), with the setting that turned them
off (:func:`buckets_off_by`) for the features' messages.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hpu_plugin import settings
from hpu_plugin.gaudi import tuning
from hpu_plugin.hookspecs import Refusal, hookimpl

if TYPE_CHECKING:
    from hpu_plugin.registry import Registry


@dataclass(frozen=True)
class FastPath:
    name: str  # the hpu_fast_path hook's ``name``
    replaces: str  # what the ordinary path is
    by: str  # the Gaudi kernel or mechanism
    lost_when_off: str  # what a user gives up by turning it off
    #: the bridge name it calls: ``module:attribute`` (``hpu`` ops: ``torch.ops.hpu:``, a
    #: ``torch.compile`` backend: ``torch.compile:name``)
    needs: str
    switch: str = ""  # its setting's suffix, where not the name without ``fused_``

    @property
    def setting(self) -> str:
        return f"{SWITCH}_" + (self.switch or self.name.upper().removeprefix("FUSED_"))


#: The switch of every fast path at once (``0`` turns them all off).
SWITCH = tuning.FAST

FAST_PATHS: tuple[FastPath, ...] = (
    FastPath("fused_optimizer", "torch.optim.AdamW / SGD steps of a Trainer or an "
             "Accelerate-prepared optimizer", "hpex FusedAdamW / FusedSGD "
             "(torch.ops.hpu.optimizer_adamw / optimizer_sgd)",
             "one launch per parameter group instead of several per parameter",
             "torch.ops.hpu:optimizer_adamw"),
    FastPath("fused_clip_norm", "gradient clipping (Accelerator.clip_grad_norm_, the "
             "Trainer's max_grad_norm)", "hpex FusedClipNorm (torch.ops.hpu.fused_clip_norm)",
             "one launch instead of a norm per gradient, a sum and a scale per gradient",
             "torch.ops.hpu:fused_clip_norm"),
    FastPath("fused_sdpa", "a Transformers model's scaled-dot-product attention",
             "hpex FusedSDPA, registered in Transformers' AttentionInterface",
             "the fused attention kernel: one launch, less memory than softmax(QK^T)V",
             "habana_frameworks.torch.hpex.kernels:FusedSDPA"),
    FastPath("fused_rms_norm", "a Transformers model's RMSNorm layers",
             "hpex FusedRMSNorm", "one launch per norm instead of five or six",
             "habana_frameworks.torch.hpex.normalization:FusedRMSNorm"),
    FastPath("fused_rope", "a Transformers model's rotary embeddings (Llama's "
             "apply_rotary_pos_emb, rebound in the model's module)",
             "hpex RotaryPosEmbeddingHelperV2 (torch.ops.hpu.rotary_pos_embedding)",
             "per layer two launches (query, key) instead of about ten, and two instead of "
             "about twenty in the backward",
             "habana_frameworks.torch.hpex.kernels:RotaryPosEmbeddingHelperV2"),
    FastPath("fused_moe", "the mixture-of-experts layers of a Transformers 5 model that "
             "names no experts_implementation (batched_mm on Gaudi otherwise)",
             "the fused MoE kernel (torch.ops.hpu.mixture_of_experts), registered as "
             "\"hpu_fused_moe\" in Transformers' ExpertsInterface; where no gradient is wanted",
             "one launch per MoE layer instead of about fifteen, and no copy of each token's "
             "expert weights",
             "torch.ops.hpu:mixture_of_experts"),
    FastPath("device_masks", "Transformers' check whether an attention mask pads nothing "
             "(read on the host at every forward with a padding mask)", "the attention mask "
             "built on the device and given to SDPA in place of is_causal",
             "no wait for the device at each forward (one or two host synchronisations a "
             "Trainer step or decoding step)", "torch.nn.functional:scaled_dot_product_attention",
             switch="MASKS"),
    FastPath("inference_graphs", "generate() (and pipeline()) of a model in eval mode that "
             "is not compiled", "graphs of the decoding steps, one per shape bucket: torch.compile "
             "with hpu_backend (eager mode; on Transformers 4.57+ a greedy call's prefill is "
             "one graph and each token one more), HPU graphs (lazy mode)",
             "one launch for the prefill and one per generated token (or per decoding step's "
             "forward) instead of one per op",
             "torch.compile:hpu_backend", switch="GRAPHS"),
    FastPath("training_graphs", "the training forward and backward of a model that Accelerate "
             "(or a Trainer) prepares and the user did not compile", "hpu_backend graphs: one "
             "per repeated block class (the decoder layers), shared by every layer; with "
             "HPU_PLUGIN_TRAIN_GRAPHS_REGION=model the model's forward and loss as one graph "
             "and its backward as another (a model whose class declares one graph)",
             "two launches per decoder layer (or per step for the model) instead of one per op",
             "torch.compile:hpu_backend", switch="TRAIN_GRAPHS"),
    FastPath("device_loss", "the Trainer's NaN/Inf filter of each step's loss (read on the "
             "host at every step: logging_nan_inf_filter) and its two reads at a logging step",
             "the filter's choice made on the device (where(isfinite(loss), loss, average)); "
             "the loss and gradient norm logged read in one transfer",
             "a Trainer step that does not wait for the device (without it, one or two host "
             "synchronisations every step, two at a logging step)",
             "torch:where", switch="LOSS"),
    FastPath("bucket_views", "a Trainer's DDP across cards keeping each gradient apart from "
             "its all-reduce bucket (copied in and out every step)", "DDP's "
             "gradient_as_bucket_view=True, as optimum-habana's GaudiTrainer sets it on Gaudi",
             "each card's gradients held once instead of twice, and no copy back from the "
             "buckets", "torch.nn.parallel:DistributedDataParallel"),
)

#: The most graphs one model keeps for ``inference_graphs`` (one per shape bucket).
GRAPHS_MAX = tuning.GRAPHS_MAX
GRAPHS_MAX_DEFAULT = tuning.GRAPHS_MAX_DEFAULT

BY_NAME: dict[str, FastPath] = {path.name: path for path in FAST_PATHS}


#: The switch of the shape buckets, with its ``_LENGTH``, ``_BATCH`` and ``_CACHE``: the
#: first-party ``shapes`` plugin (``plugins.bucket_sizes``) answers ``hpu_shape_buckets``
#: from them.
BUCKETS = tuning.BUCKETS


def buckets(registry: Registry, kind: str, limit: int | None) -> tuple[int, ...]:
    """The sizes of ``kind`` (``"length"``, ``"batch"``, ``"cache"``) the features pad to:
    the registry's ``hpu_shape_buckets`` (the guard refuses, naming the plugin, any that are
    not ascending positive sizes); none when no plugin has an opinion."""
    return registry.shape_buckets(kind, limit) or ()


def buckets_off_by(kind: str, environ: Mapping[str, str] = os.environ) -> str | None:
    """The setting that turned the buckets of ``kind`` off, for the message that says why a
    shape is not bucketed (``tuning.buckets_off_by``); None if none."""
    return tuning.buckets_off_by(kind, environ)


def take(registry: Registry, name: str, context: Mapping[str, Any]) -> bool:
    """Take fast path ``name`` here? What the features ask, once per object that would
    take it (``context``: plain facts of the case). Nobody's opinion means no."""
    return registry.fast_path(name, context)


def _read(variable: str, environ: Mapping[str, str]) -> bool | None:
    try:
        return tuning.fast_switch(variable, environ)
    except settings.SettingError as exc:
        raise Refusal(str(exc)) from None


def enabled(name: str, environ: Mapping[str, str]) -> bool:
    """The setting of fast path ``name``: its own switch, else the common one, else on."""
    own = _read(BY_NAME[name].setting, environ)
    if own is not None:
        return own
    common = _read(SWITCH, environ)
    return True if common is None else common


@hookimpl
def hpu_fast_path(name: str, context: Mapping[str, Any]) -> bool | None:
    if name not in BY_NAME:
        return None
    return enabled(name, os.environ)
