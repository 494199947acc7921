"""Attention masks made on the device, so a forward with a padding mask does not wait for it.

Before building a model's attention mask, Transformers checks whether it may skip it and
let SDPA apply ``is_causal`` instead: when the padding mask pads nothing
(``masking_utils._ignore_causal_mask_sdpa``; ``AttentionMaskConverter._ignore_causal_mask_sdpa``
before ``masking_utils`` existed). Knowing that means reading the mask's values into
Python, so every forward with an ``attention_mask`` (every ``Trainer`` step, every decoding
step) synchronises the host with the device once, twice when the batch is padded. On Gaudi
that empties the launch queue each time. For a padding mask on ``hpu`` this fast path
answers "do not skip" without reading it: the mask is built on the device (a few launches)
and SDPA gets it in place of ``is_causal``, which gives the same result (a causal mask that
pads nothing is what ``is_causal`` means). It is the choice Transformers already makes under
``torch.compile``, which never reads a traced mask. Masks on other devices, and calls
without a padding mask, go to Transformers' own check.
"""

from __future__ import annotations

import functools
import types
from typing import Any

from hpu_plugin.fast_paths.decisions import take
from hpu_plugin.gaudi.software import DEVICE_TYPE
from hpu_plugin.hosts.replacing import stay_out
from hpu_plugin.patching import Patches, is_ours, ours
from hpu_plugin.registry import Registry

HOST = "transformers"
ADAPTER = "device masks"
NAME = "_ignore_causal_mask_sdpa"


def _on_hpu(mask: Any) -> bool:
    device = getattr(mask, "device", None)
    return getattr(device, "type", None) == DEVICE_TYPE


def make_check(registry: Registry, original: Any, mask_argument: str) -> Any:
    """Transformers' check, answered ``False`` for an ``hpu`` padding mask where the fast
    path is on; ``mask_argument`` is the name of its mask parameter (also its first)."""

    import torch

    @functools.wraps(original)
    def _ignore_causal_mask_sdpa(*args: Any, **kwargs: Any) -> bool:
        # inside a torch.compile trace Transformers reads no mask itself, and a hook call
        # there would break the graph: the check is Transformers' own
        if torch.compiler.is_compiling():
            return bool(original(*args, **kwargs))
        mask = args[0] if args else kwargs.get(mask_argument)
        if _on_hpu(mask) and take(registry, "device_masks", {}):
            return False
        return bool(original(*args, **kwargs))

    return ours(_ignore_causal_mask_sdpa)


def install_masking_utils(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    """Transformers 4.53 and later: the module-level check ``sdpa_mask`` calls by name."""
    original = vars(module).get(NAME)
    if original is None:
        stay_out(HOST, ADAPTER, f"masking_utils.{NAME}")
    elif not is_ours(original):
        patches.set(module, NAME, make_check(registry, original, "padding_mask"))


def install_converter(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    """Every release: ``AttentionMaskConverter``'s own check, which the models of releases
    before ``masking_utils`` (and some models since) call."""
    converter = getattr(module, "AttentionMaskConverter", None)
    method = vars(converter).get(NAME) if converter is not None else None
    if not isinstance(method, staticmethod):
        stay_out(HOST, ADAPTER, f"AttentionMaskConverter.{NAME}")
    elif not is_ours(method.__func__):
        patches.set(converter, NAME,
                    staticmethod(make_check(registry, method.__func__, "attention_mask")))


def install(registry: Registry, patches: Patches) -> None:
    from hpu_plugin import importhook

    importhook.when_imported("transformers.masking_utils", lambda module: install_masking_utils(
        registry, patches, module))
    importhook.when_imported("transformers.modeling_attn_mask_utils",
                             lambda module: install_converter(registry, patches, module))
