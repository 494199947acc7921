"""Environment defaults the plugin applies, each only where the user set nothing, and the
parsers of the Gaudi switches they concern."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from hpu_plugin import settings
from hpu_plugin.gaudi import visibility
from hpu_plugin.gaudi.config_error import GaudiConfigError

LAZY_MODE = "PT_HPU_LAZY_MODE"
INT64 = "PT_ENABLE_INT64_SUPPORT"

#: Transformers uses int64 token ids; Gaudi casts int64 to int32 unless this is on, and its
#: CI runs with it on (reference page). Eager mode is the documented default and the only
#: mode in which ``torch.compile`` works (Gaudi support matrix).
DEFAULTS: Mapping[str, str] = {
    INT64: "1",
    LAZY_MODE: "0",
}

#: Gaudi's recipe cache on disk (``<path>,<delete on start>,<size MB>``): unset, every
#: process compiles each graph again; set, a recipe compiled once is read from disk by later
#: runs and by the other ranks. Its older form is the path alone in ``PT_RECIPE_CACHE_PATH``.
RECIPE_CACHE = "PT_HPU_RECIPE_CACHE_CONFIG"
RECIPE_CACHE_PATH = "PT_RECIPE_CACHE_PATH"
#: The bound the plugin's default gives the directory (the Gaudi software's own default).
RECIPE_CACHE_MB = 1024


def recipe_cache_default(environ: Mapping[str, str]) -> str | None:
    """The plugin's recipe cache: ``recipes`` under its cache directory
    (``HPU_PLUGIN_CACHE_DIR``, else ``$XDG_CACHE_HOME/hpu_plugin``, else
    ``~/.cache/hpu_plugin``), kept between runs, bounded to 1 GB. ``None`` (said once) when
    that path holds a ',': the Gaudi software splits the setting at commas and stops."""
    override = environ.get("HPU_PLUGIN_CACHE_DIR", "").strip()
    if override:
        root = Path(override).expanduser()
    else:
        base = environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(Path.home(), ".cache")
        root = Path(base).expanduser() / "hpu_plugin"
    if "," in str(root):
        logging.getLogger("hpu_plugin").warning(
            "hpu_plugin: no recipe cache on disk: its directory %s holds a ',', which %s "
            "cannot carry; set HPU_PLUGIN_CACHE_DIR to a path without one, or set %s "
            "yourself", root / "recipes", RECIPE_CACHE, RECIPE_CACHE)
        return None
    return f"{root / 'recipes'},false,{RECIPE_CACHE_MB}"


def check_recipe_cache(raw: str | None) -> None:
    """``PT_HPU_RECIPE_CACHE_CONFIG`` as the bridge splits it (``recipe_cache_config.cpp``):
    up to three parts at each ',' (a directory, delete it at start, its size in MB), an empty
    part left at its default. The bridge stops on anything else at its first compile, after
    the program has started its work: refused here instead."""
    if not raw:
        return
    parts = raw.split(",")
    if len(parts) > 1 and parts[-1] == "":  # std::getline drops one trailing empty part
        parts.pop()
    accepted = "'<directory>[,<delete at start: true or false>[,<size in MB>]]'"
    if len(parts) > 3:
        raise EnvironmentValueError(
            RECIPE_CACHE, raw, accepted, "use a directory without ',' in its path",
            problem=f"the Gaudi software splits it at each ',' into {len(parts)} parts and "
            "stops on more than 3")
    if len(parts) > 1 and parts[1] and parts[1].lower() not in BRIDGE_BOOL:
        raise EnvironmentValueError(
            RECIPE_CACHE, raw, accepted, "write true or false as the second part",
            problem=f"its second part {parts[1]!r} is not 1, true, 0 or false, and the Gaudi "
            "software stops")
    # the bridge's strtoul: decimal, or hexadecimal with or without 0x
    if len(parts) > 2 and not re.fullmatch(r"(0x)?[0-9a-f]*", parts[2], re.IGNORECASE):
        raise EnvironmentValueError(
            RECIPE_CACHE, raw, accepted, "write the size as a number of MB, e.g. 1024",
            problem=f"its size {parts[2]!r} is not a number, and the Gaudi software stops")


_TRUE = settings.ON_WORDS
_FALSE = settings.OFF_WORDS - {""}


class EnvironmentValueError(GaudiConfigError):
    """A Gaudi switch holds a value the Gaudi software would misread."""


def apply_defaults(environ: MutableMapping[str, str]) -> dict[str, str]:
    """Set each default the user left unset in ``environ``; return what was set. Activation
    hands the hooks a copy of ``os.environ`` and exports the result through
    ``patching.this_process.environment``, which records it."""
    applied = {}
    wanted = dict(DEFAULTS)
    module = one_visible_module(environ)
    if module is not None:
        wanted[visibility.MODULE_ID] = str(module)
    if RECIPE_CACHE_PATH not in environ and RECIPE_CACHE not in environ:
        default = recipe_cache_default(environ)
        if default is not None:
            wanted[RECIPE_CACHE] = default
    for name, value in wanted.items():
        if name not in environ:
            environ[name] = value
            applied[name] = value
    return applied


def one_visible_module(environ: Mapping[str, str]) -> int | None:
    """The module of a process that sees exactly one (Ray's ``{"HPU": 1}`` workers, a
    Kubernetes container given one module), else ``None``.

    Pinning it in ``HLS_MODULE_ID`` changes no device choice: the Gaudi software would
    acquire that module by type. It keeps the Gaudi software's ``hccl`` import (part of
    ``import habana_frameworks.torch``) from asserting "There is not enough devices
    available" in a process started with ``LOCAL_RANK`` 1 or more: with ``HLS_MODULE_ID``
    unset, that import takes the local rank as an index into the visible modules."""
    try:
        modules = visibility.visible_modules(environ)
    except GaudiConfigError:  # refused, naming the variable, by the device checks
        return None
    return modules[0] if modules is not None and len(modules) == 1 else None


def is_lazy(environ: Mapping[str, str]) -> bool:
    """Lazy mode, read as the Gaudi software reads it (default "1" in its Python code)."""
    return environ.get(LAZY_MODE, "1") != "0"


def parse_lazy_mode(raw: str | None) -> bool:
    """``PT_HPU_LAZY_MODE``: True for lazy. Only ``0`` and ``1`` are accepted.

    The Gaudi Python code takes every value except ``"0"`` as lazy, so ``false`` or ``off``
    silently selects lazy mode, the opposite of what its writer meant: refuse it.
    Unset means lazy, as the Gaudi software reads it (the plugin sets ``0`` first).
    """
    if raw is None:
        return True
    if raw == "0":
        return False
    if raw == "1":
        return True
    meant = "eager" if raw.strip().lower() in _FALSE else "lazy"
    raise EnvironmentValueError(
        LAZY_MODE,
        raw,
        "'0' (eager, torch.compile) or '1' (lazy)",
        f"set {LAZY_MODE}={'0' if meant == 'eager' else '1'} for {meant} mode",
        problem="the Gaudi software reads every value but '0' as lazy mode",
    )


#: How the bridge reads a flag its ``env_flags.yaml`` types ``bool`` (``parse_env_bool`` in
#: ``synapse_helpers/env_flags.cpp``): these words in any case, nothing stripped; empty is
#: unset; any other value stops the process ("couldn't be converted properly").
BRIDGE_BOOL: Mapping[str, bool] = {"1": True, "true": True, "0": False, "false": False}


def parse_bridge_bool(variable: str, raw: str | None, supported: str, fix: str) -> bool | None:
    """One of the bridge's boolean flags, or ``None`` when unset. A value the bridge stops on
    is refused here, so the program says so before it runs rather than on a Gaudi."""
    if not raw:
        return None
    if raw.lower() in BRIDGE_BOOL:
        return BRIDGE_BOOL[raw.lower()]
    raise EnvironmentValueError(
        variable, raw, supported, fix,
        problem="the Gaudi software accepts only 1, true, 0 or false (any case) and stops "
        "on any other value",
    )


def parse_int64_support(raw: str | None) -> bool | None:
    """``PT_ENABLE_INT64_SUPPORT``: True/False, or ``None`` when unset (the Gaudi default)."""
    return parse_bridge_bool(
        INT64, raw, "'1' (int64 kept on the device) or '0' (int64 cast to int32)",
        f"set {INT64}=1, which Transformers needs for int64 token ids")


def faults(environ: Mapping[str, str]) -> list[GaudiConfigError]:
    """The Gaudi switches the plugin reads that hold a value the Gaudi software would stop
    on or misread; activation refuses them before anything runs (``migration.faults``
    checks the GPU Migration Toolkit's)."""
    found = []
    for check in (lambda: parse_lazy_mode(environ.get(LAZY_MODE)),
                  lambda: parse_int64_support(environ.get(INT64)),
                  lambda: check_recipe_cache(environ.get(RECIPE_CACHE))):
        try:
            check()
        except GaudiConfigError as exc:
            found.append(exc)
    return found
