"""Gaudi's fast paths (``hpu_plugin.fast_paths.catalog``): on for ``hpu`` unless turned off.

Each fast path gives the ordinary path's results (the hosts take it only where it does), so
on Gaudi each is on by default. ``HPU_PLUGIN_FAST=0`` turns every one off;
``HPU_PLUGIN_FAST_<NAME>`` (``_OPTIMIZER``, ``_CLIP_NORM``, ``_SDPA``, ``_RMS_NORM``,
``_ROPE``, ``_GRAPHS``) turns one off (``0``) or on (``1``) whatever the first says.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from hpu_plugin import settings
from hpu_plugin.fast_paths.catalog import BY_NAME, SWITCH
from hpu_plugin.hookspecs import Refusal, hookimpl


def _read(variable: str, environ: Mapping[str, str]) -> bool | None:
    raw = environ.get(variable)
    if raw is None or not raw.strip():
        return None
    try:
        return settings.switch(variable, raw, fix=f"{variable}=0 turns it off, "
                               f"{variable}=1 on (on Gaudi the default)")
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
