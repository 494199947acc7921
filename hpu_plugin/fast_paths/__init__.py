"""Gaudi's fast paths for unchanged code: the kernels, graphs and static shapes that make
Transformers and Accelerate fast on Gaudi without a change to the user's script.

The host adapters (``hpu_plugin.hosts``) make the hosts work on ``hpu``; this layer makes
them fast there, and is installed by them only with a device ready. Every feature asks one
place whether it is on (:mod:`.decisions`, which asks the registry's ``hpu_fast_path`` and
``hpu_shape_buckets`` hooks) and takes its path only where it gives the ordinary path's
results:

- :mod:`.generate_buckets` and :mod:`.trainer_buckets`: the shapes of ``generate()`` and of
  ``Trainer`` batches padded to buckets, for compiled models;
- :mod:`.fused_training`: the fused optimizer and clip-norm in Accelerate;
- :mod:`.fused_modeling`: the fused attention (through Transformers' attention registry) and
  RMSNorm kernels, with :mod:`.fused_rope` (the rotary kernel);
- :mod:`.fused_moe`: the fused mixture-of-experts kernel, through Transformers' experts
  registry;
- :mod:`.device_masks`: attention masks decided on the device, without a host wait;
- :mod:`.inference_graphs` and :mod:`.decoding_loop`: ``generate()`` decoded by graphs;
- :mod:`.training_graphs`: a prepared model's repeated blocks trained through graphs;
- :mod:`.trainer_syncs`: a ``Trainer`` step whose loss filter does not wait for the device;
- :mod:`.bucket_views`: a ``Trainer``'s DDP holding each gradient once, in its bucket.

:mod:`.decisions` also says what each replaces and what turning it off costs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the package is imported with its ``decisions`` plugin: keep it light
    from hpu_plugin.patching import Patches
    from hpu_plugin.registry import Registry


def install(registry: Registry, patches: Patches) -> None:
    """Register every fast path's post-import hooks (with a device ready)."""
    from hpu_plugin.fast_paths import (
        bucket_views,
        device_masks,
        fused_modeling,
        fused_moe,
        fused_training,
        generate_buckets,
        trainer_buckets,
        trainer_syncs,
        training_graphs,
    )

    generate_buckets.install(registry, patches)
    trainer_buckets.install(registry, patches)
    fused_training.install(registry, patches)
    fused_modeling.install(registry, patches)
    fused_moe.install(registry, patches)
    device_masks.install(registry, patches)
    training_graphs.install(registry, patches)
    trainer_syncs.install(registry, patches)
    bucket_views.install(registry, patches)
