"""Shape buckets: the sizes hosts pad prompts, batches and caches to on Gaudi.

Each new shape of a compiled graph is a graph compilation on Gaudi (``hpu_plugin.gaudi.
shapes``); padding the sizes that vary to a few buckets bounds them. This plugin only
decides the buckets (the hosts pad, where padding changes no result): the defaults from the
Gaudi facts, or the user's settings.

- ``HPU_PLUGIN_BUCKETS``: ``0``/``off`` turns bucketing off, ``1``/``on`` (the default) on;
- ``HPU_PLUGIN_BUCKETS_LENGTH``, ``_BATCH``, ``_CACHE``: the buckets of one kind, as
  ascending sizes (``128,256,512``), or ``0``/``off`` for that kind off.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from hpu_plugin.gaudi.shapes import KINDS, default_buckets
from hpu_plugin.hookspecs import Refusal, hookimpl

SWITCH = "HPU_PLUGIN_BUCKETS"
_ON = {"", "1", "on", "true", "yes"}
_OFF = {"0", "off", "false", "no"}


def _switch(environ: Mapping[str, str], name: str) -> bool | None:
    """True/False for a switch word, None for anything else."""
    value = environ.get(name, "").strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    return None


def parse_sizes(name: str, raw: str) -> tuple[int, ...]:
    """``"128,256,512"`` -> ``(128, 256, 512)``; a clear error naming ``name`` otherwise."""
    try:
        sizes = tuple(int(part) for part in raw.replace(" ", "").split(",") if part)
    except ValueError:
        sizes = ()
    if not sizes or any(b <= 0 for b in sizes) or list(sizes) != sorted(set(sizes)):
        raise Refusal(
            f"{name}={raw!r} is not a list of bucket sizes: give ascending positive integers "
            f"(e.g. {name}=128,256,512), or {name}=0 to turn this kind of bucketing off."
        )
    return sizes


def buckets(kind: str, limit: int | None, environ: Mapping[str, str]) -> tuple[int, ...]:
    switch = _switch(environ, SWITCH)
    if switch is None:
        raise Refusal(
            f"{SWITCH}={environ[SWITCH]!r} is not a switch: use {SWITCH}=0 to turn shape "
            f"buckets off or {SWITCH}=1 to keep them on (the default)."
        )
    if not switch:
        return ()
    name = f"{SWITCH}_{kind.upper()}"
    raw = environ.get(name, "").strip()
    if not raw:
        return default_buckets(kind, limit)
    if raw.lower() in _OFF:
        return ()
    return parse_sizes(name, raw)


@hookimpl
def hpu_shape_buckets(kind: str, device_type: str, limit: int | None) -> tuple[int, ...] | None:
    if device_type != "hpu" or kind not in KINDS:
        return None
    return buckets(kind, limit, os.environ)
