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
from hpu_plugin.gaudi.shape_buckets import KINDS, default_buckets
from hpu_plugin.hookspecs import Refusal, hookimpl

SWITCH = "HPU_PLUGIN_BUCKETS"


def _switch(environ: Mapping[str, str]) -> bool:
    """``HPU_PLUGIN_BUCKETS`` through the settings parser; unset or blank: on."""
    raw = environ.get(SWITCH)
    try:
        return settings.switch(
            SWITCH, raw if raw and raw.strip() else None, default=True,
            fix=f"use {SWITCH}=0 to turn shape buckets off or {SWITCH}=1 to keep them on "
            "(the default)")
    except settings.SettingError as exc:
        raise Refusal(str(exc)) from None


def parse_sizes(name: str, raw: str) -> tuple[int, ...]:
    """``"128,256,512"`` -> ``(128, 256, 512)`` (the settings parser); a :class:`Refusal`
    naming ``name``, the value and the fix otherwise."""
    try:
        return settings.ascending(
            name, raw, fix=f"give ascending positive integers (e.g. {name}=128,256,512), or "
            f"{name}=0 to turn this kind of bucketing off")
    except settings.SettingError as exc:
        raise Refusal(str(exc)) from None


def buckets(kind: str, limit: int | None, environ: Mapping[str, str]) -> tuple[int, ...]:
    if not _switch(environ):
        return ()
    name = f"{SWITCH}_{kind.upper()}"
    raw = environ.get(name, "").strip()
    if not raw:
        return default_buckets(kind, limit)
    if raw.lower() in settings.OFF_WORDS:
        return ()
    return parse_sizes(name, raw)


@hookimpl
def hpu_shape_buckets(kind: str, limit: int | None) -> tuple[int, ...] | None:
    if kind not in KINDS:
        return None
    return buckets(kind, limit, os.environ)
