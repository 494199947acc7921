"""Gaudi's fast paths for unchanged code, installed where the hosts decide them.

Each adapter asks the registry (``hpu_fast_path``) whether to take a fast path, and takes
it only where it gives the ordinary path's results: the fused optimizer and clip-norm in
Accelerate (``fused_training``), the fused attention (through Transformers'
attention registry), RMSNorm kernels (``fused_modeling``) and rotary kernel (``fused_rope``,
given with the RMSNorm). Installed only with a device ready.
"""

from __future__ import annotations

from hpu_plugin.patching import Patches
from hpu_plugin.registry import Registry


def install(registry: Registry, patches: Patches) -> None:
    from hpu_plugin.hosts import fused_modeling, fused_training

    fused_training.install(registry, patches)
    fused_modeling.install(registry, patches)
