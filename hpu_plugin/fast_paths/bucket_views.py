"""Transformers' ``Trainer`` across cards: each gradient held once, in DDP's buckets.

DDP all-reduces gradients in flat buckets. By default a parameter's gradient is a tensor of
its own, copied into its bucket for the all-reduce and back out of it after, so each card
holds every gradient twice between the backward and the optimizer step: an 8-billion
parameter model's float32 gradients are 32 GB more on each card. With DDP's
``gradient_as_bucket_view=True`` the gradients are views of the buckets, held once and not
copied back. optimum-habana's ``GaudiTrainer`` sets it for every DDP job on Gaudi; a
``Trainer``'s arguments have no field for it, so unchanged ``Trainer`` code never does.

Taken where a ``Trainer`` on ``hpu`` is about to have Accelerate wrap its model in DDP (one
process per card, Accelerate's ``MULTI_HPU``) with the DDP settings the ``Trainer`` built
from its arguments, which leave the option at DDP's default. The all-reduce and every
number are the same; only where a gradient lives changes. Not taken for an Accelerate loop
of the user's own: such code may keep a gradient tensor from one step to the next
(``norms.append(p.grad)``), which, as a view of a bucket, the next step would overwrite; a
``Trainer`` keeps none. Not taken under DeepSpeed or FSDP (they own their gradients) or
with ``HPU_PLUGIN_FAST_BUCKET_VIEWS=0``.
"""

from __future__ import annotations

import dataclasses
import functools
import types
from typing import Any

from hpu_plugin.fast_paths.decisions import take
from hpu_plugin.gaudi.software import DEVICE_TYPE
from hpu_plugin.hosts.replacing import original_of
from hpu_plugin.patching import Patches, ours, record_out
from hpu_plugin.registry import Registry

NAME = "bucket_views"
HOST = "transformers"
ADAPTER = "DDP gradients as bucket views"
#: Accelerate's distributed type for one process per Gaudi card under DDP.
MULTI_HPU = "MULTI_HPU"


def _ddp_on_hpu(trainer: Any) -> bool:
    """Is Accelerate about to wrap this ``Trainer``'s model in DDP on ``hpu``?"""
    args, accelerator = trainer.args, getattr(trainer, "accelerator", None)
    kind = getattr(getattr(accelerator, "distributed_type", None), "value", None)
    return (getattr(getattr(args, "device", None), "type", None) == DEVICE_TYPE
            and getattr(args.parallel_mode, "value", None) == "distributed"
            and kind == MULTI_HPU)


def install_trainer(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    cls = getattr(module, "Trainer", None)
    wrap = original_of(cls, "_wrap_model", HOST, ADAPTER, "Trainer._wrap_model", own=True)
    if wrap is None:
        return

    @functools.wraps(wrap)
    def _wrap_model(self: Any, model: Any, *args: Any, **kwargs: Any) -> Any:
        wrapped = wrap(self, model, *args, **kwargs)
        training = kwargs.get("training", args[0] if args else True)
        if not training or not _ddp_on_hpu(self):
            return wrapped
        from accelerate.utils import DistributedDataParallelKwargs

        handler = getattr(self.accelerator, "ddp_handler", None)
        if handler is not None and (not isinstance(handler, DistributedDataParallelKwargs)
                                    or handler.gradient_as_bucket_view):
            return wrapped  # not Accelerate's DDP settings, or views already
        if not take(registry, NAME, {"trainer": type(self).__name__}):
            record_out(HOST, ADAPTER, f"not taken for {type(self).__name__}: turned off "
                       "(HPU_PLUGIN_FAST_BUCKET_VIEWS, HPU_PLUGIN_FAST or a plugin's hook)")
            return wrapped
        # a copy: the Trainer's own settings object is left as it built it
        self.accelerator.ddp_handler = (
            DistributedDataParallelKwargs(gradient_as_bucket_view=True) if handler is None
            else dataclasses.replace(handler, gradient_as_bucket_view=True))
        return wrapped

    patches.set(cls, "_wrap_model", ours(_wrap_model))


def install(registry: Registry, patches: Patches) -> None:
    """Register the post-import hook of ``Trainer`` (only with a device ready)."""
    from hpu_plugin import importhook

    importhook.when_imported(
        "transformers.trainer", lambda module: install_trainer(registry, patches, module))
