"""Shape buckets: the sizes hosts pad prompts, batches and caches to on Gaudi.

Each new shape of a compiled graph is a graph compilation on Gaudi (``hpu_plugin.gaudi.
shape_buckets``); padding the sizes that vary to a few buckets bounds them. This plugin only
decides the buckets (the hosts pad, where padding changes no result): the defaults from the
Gaudi facts, or the user's settings.

- ``HPU_PLUGIN_BUCKETS``: ``0``/``off`` turns bucketing off, ``1``/``on`` (the default) on;
- ``HPU_PLUGIN_BUCKETS_LENGTH``, ``_BATCH``, ``_CACHE``: the buckets of one kind, as
  ascending sizes (``128,256,512``), or ``0``/``off`` for that kind off.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from hpu_plugin import settings
from hpu_plugin.gaudi import tuning
from hpu_plugin.gaudi.shape_buckets import KINDS, default_buckets
from hpu_plugin.hookspecs import Refusal, hookimpl

SWITCH = tuning.BUCKETS


def _refused(error: settings.SettingError) -> Refusal:
    return Refusal(str(error))


def parse_sizes(name: str, raw: str) -> tuple[int, ...]:
    """``"128,256,512"`` -> ``(128, 256, 512)`` (``tuning.bucket_sizes``); a
    :class:`Refusal` naming ``name``, the value and the fix otherwise."""
    kind = name.removeprefix(f"{SWITCH}_").lower()
    try:
        return tuning.bucket_sizes(kind, {name: raw}) or ()
    except settings.SettingError as exc:
        raise _refused(exc) from None


def buckets(kind: str, limit: int | None, environ: Mapping[str, str]) -> tuple[int, ...]:
    """The buckets of ``kind`` from the settings (``tuning``), else Gaudi's defaults."""
    try:
        if not tuning.buckets_on(environ):
            return ()
        given = tuning.bucket_sizes(kind, environ)
    except settings.SettingError as exc:
        raise _refused(exc) from None
    return default_buckets(kind, limit) if given is None else given


@hookimpl
def hpu_shape_buckets(kind: str, limit: int | None) -> tuple[int, ...] | None:
    if kind not in KINDS:
        return None
    return buckets(kind, limit, os.environ)
