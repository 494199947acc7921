"""The settings of the fast paths, the shape buckets and the fp8 switch: each parsed here and
nowhere else. ``HPU_PLUGIN_FAST`` and ``HPU_PLUGIN_FAST_<NAME>`` turn fast paths off or on,
``HPU_PLUGIN_GRAPHS_MAX`` bounds the graphs one model keeps,
``HPU_PLUGIN_TRAIN_GRAPHS_REGION`` says what the training graphs compile,
``HPU_PLUGIN_BUCKETS`` with its ``_LENGTH``, ``_BATCH``, ``_CACHE`` and ``_GROUP`` decide
the shape buckets, and ``HPU_PLUGIN_FP8`` with ``HPU_PLUGIN_FP8_STATS`` gives Neural
Compressor's fp8 to models loaded with ``from_pretrained``. Any other
``HPU_PLUGIN_FAST_...``, ``HPU_PLUGIN_BUCKETS_...`` or ``HPU_PLUGIN_FP8_...`` is a misspelt
one. The features read them deep inside a user's ``train()``, ``generate()`` or
``from_pretrained``, where a refusal would come late and once per object that asks; so
activation asks :func:`faults` before it changes anything, and a bad value turns the plugin
off there, with one message naming the variable, its value, what is accepted and the fix.
``hpu-plugin doctor`` lists the same faults.

Every parser takes the environment it reads (nothing here keeps state) and raises
:class:`~hpu_plugin.errors.SettingError`; unset or blank means the default.
"""

from __future__ import annotations

import difflib
import functools
import os
from collections.abc import Callable, Mapping

from hpu_plugin import settings
from hpu_plugin.errors import SettingError, quoted
from hpu_plugin.gaudi.shape_buckets import KINDS

#: The switch of every fast path at once (``0`` turns them all off).
FAST = "HPU_PLUGIN_FAST"
#: The suffix of each fast path's own switch (``HPU_PLUGIN_FAST_SDPA``...).
FAST_NAMES: tuple[str, ...] = ("OPTIMIZER", "CLIP_NORM", "SDPA", "RMS_NORM", "ROPE", "MOE",
                              "MASKS", "GRAPHS", "TRAIN_GRAPHS", "LOSS", "BUCKET_VIEWS")
#: The most graphs one model keeps for the inference graphs (one per shape bucket).
GRAPHS_MAX = "HPU_PLUGIN_GRAPHS_MAX"
GRAPHS_MAX_DEFAULT = 8
#: The most graphs a budget may allow: each holds a static cache's worth of device memory.
GRAPHS_MOST = 1024
#: What the training graphs compile: the whole model (``model``, where its class declares
#: a forward that compiles as one graph) or its repeated blocks (``blocks``).
TRAIN_GRAPHS_REGION = "HPU_PLUGIN_TRAIN_GRAPHS_REGION"
TRAIN_GRAPHS_REGIONS = ("blocks", "model")
#: The switch of the shape buckets; ``_LENGTH``, ``_BATCH`` and ``_CACHE`` give the sizes of
#: one kind, ``_GROUP`` turns off the grouping of training rows by length.
BUCKETS = "HPU_PLUGIN_BUCKETS"
BUCKETS_GROUP = f"{BUCKETS}_GROUP"
#: fp8 for code that passes no ``quantization_config``: ``measure`` records the maxima
#: Neural Compressor needs while the program runs, ``quantize`` converts each model loaded.
FP8 = "HPU_PLUGIN_FP8"
FP8_MODES = ("measure", "quantize")
#: Where the measurement goes and is read from: Neural Compressor's ``dump_stats_path``, a
#: path prefix (``./fp8/measure`` writes ``./fp8/measure_hooks_maxabs.npz``...).
FP8_STATS = "HPU_PLUGIN_FP8_STATS"


def _given(environ: Mapping[str, str], variable: str) -> str | None:
    raw = environ.get(variable)
    return raw if raw is not None and raw.strip() else None


def fast_switch(variable: str, environ: Mapping[str, str]) -> bool | None:
    """``HPU_PLUGIN_FAST`` or one ``HPU_PLUGIN_FAST_<NAME>``; None when unset or blank."""
    raw = _given(environ, variable)
    if raw is None:
        return None
    return settings.switch(variable, raw, fix=f"{variable}=0 turns it off, "
                           f"{variable}=1 on (on Gaudi the default)")


def graph_budget(environ: Mapping[str, str]) -> int:
    """``HPU_PLUGIN_GRAPHS_MAX``: how many graphs (buckets) one model may keep. ``0`` is
    refused: it would leave the graphs on with no room for one, and the switch that turns
    them off is ``HPU_PLUGIN_FAST_GRAPHS=0``."""
    raw = _given(environ, GRAPHS_MAX)
    if raw is None:
        return GRAPHS_MAX_DEFAULT
    return settings.integer(
        GRAPHS_MAX, raw, minimum=1, maximum=GRAPHS_MOST,
        fix=f"set {GRAPHS_MAX} to a number of graphs from 1 to {GRAPHS_MOST} (default "
        f"{GRAPHS_MAX_DEFAULT}), or unset it; {FAST}_GRAPHS=0 turns graphs off")


def train_graphs_region(environ: Mapping[str, str] | None = None) -> str:
    """``HPU_PLUGIN_TRAIN_GRAPHS_REGION``: ``blocks`` (the default) or ``model``."""
    raw = _given(os.environ if environ is None else environ, TRAIN_GRAPHS_REGION)
    if raw is None:
        return TRAIN_GRAPHS_REGIONS[0]
    region = raw.strip().lower()
    if region not in TRAIN_GRAPHS_REGIONS:
        raise SettingError(
            TRAIN_GRAPHS_REGION, raw, " or ".join(TRAIN_GRAPHS_REGIONS),
            fix=f"{TRAIN_GRAPHS_REGION}=blocks compiles one graph per repeated block class "
            f"(the decoder layers: compile time that does not grow with the depth; the "
            f"default), =model the model's forward and loss as one graph (fewer launches, a "
            f"compilation that grows with the depth); {FAST}_TRAIN_GRAPHS=0 turns training "
            "graphs off")
    return region


def buckets_on(environ: Mapping[str, str]) -> bool:
    """``HPU_PLUGIN_BUCKETS``; unset or blank: on."""
    return settings.switch(
        BUCKETS, _given(environ, BUCKETS), default=True,
        fix=f"use {BUCKETS}=0 to turn shape buckets off or {BUCKETS}=1 to keep them on "
        "(the default)")


def bucket_sizes(kind: str, environ: Mapping[str, str]) -> tuple[int, ...] | None:
    """``HPU_PLUGIN_BUCKETS_<KIND>``: the sizes given (``128,256,512``), ``()`` for that kind
    off (``0``/``off``), None when unset or blank (the Gaudi defaults)."""
    name = f"{BUCKETS}_{kind.upper()}"
    raw = _given(environ, name)
    if raw is None:
        return None
    if raw.strip().lower() in settings.OFF_WORDS:
        return ()
    return settings.ascending(
        name, raw, fix=f"give ascending positive integers (e.g. {name}=128,256,512), or "
        f"{name}=0 to turn this kind of bucketing off")


def group_rows(environ: Mapping[str, str]) -> bool:
    """``HPU_PLUGIN_BUCKETS_GROUP``: draw training rows of similar length together; unset or
    blank: on."""
    return settings.switch(BUCKETS_GROUP, _given(environ, BUCKETS_GROUP), default=True,
                           fix=f"{BUCKETS_GROUP}=0 keeps the sampler's random order, "
                           f"{BUCKETS_GROUP}=1 groups rows (the default)")


def buckets_off_by(kind: str, environ: Mapping[str, str]) -> str | None:
    """The setting that turned the buckets of ``kind`` off (``HPU_PLUGIN_BUCKETS=0``, or
    ``_<KIND>=0``), for the message that says why a shape is not bucketed; None if none."""
    for name in (BUCKETS, f"{BUCKETS}_{kind.upper()}"):
        raw = _given(environ, name)
        if raw is not None and raw.strip().lower() in settings.OFF_WORDS:
            return f"{name}={raw} is set"
    return None


def fp8_mode(environ: Mapping[str, str]) -> str | None:
    """``HPU_PLUGIN_FP8``: ``"measure"``, ``"quantize"``, or None (unset, blank or off)."""
    raw = _given(environ, FP8)
    if raw is None or raw.strip().lower() in settings.OFF_WORDS:
        return None
    mode = raw.strip().lower()
    if mode not in FP8_MODES:
        raise SettingError(
            FP8, raw, "measure or quantize (or 0 for off)",
            fix=f"run once with {FP8}=measure and {FP8_STATS}=<dir>/measure to record the "
            f"measurement, then with {FP8}=quantize and the same {FP8_STATS}; unset {FP8} "
            "for bf16")
    return mode


def fp8_stats(environ: Mapping[str, str]) -> str | None:
    """``HPU_PLUGIN_FP8_STATS``, which ``HPU_PLUGIN_FP8`` needs: a measurement written in one
    run is read in the next, so it cannot default to a place that changes between runs. A bad
    ``HPU_PLUGIN_FP8`` is :func:`fp8_mode`'s fault alone, so that it is said once."""
    try:
        mode = fp8_mode(environ)
    except SettingError:
        mode = None
    raw = _given(environ, FP8_STATS)
    if mode is not None and raw is None:
        raise SettingError(
            FP8_STATS, environ.get(FP8_STATS, ""), "a path prefix for the measurement files",
            fix=f"set {FP8_STATS}=<dir>/measure (the same in the measure and quantize runs)",
            message=f"{FP8}={mode} needs {FP8_STATS}, where the measurement is written and "
            f"read; fix: set {FP8_STATS}=<dir>/measure (the same in both runs)")
    return None if raw is None else raw.strip()


def names() -> tuple[str, ...]:
    """Every variable this module reads."""
    return (FAST, *(f"{FAST}_{name}" for name in FAST_NAMES), GRAPHS_MAX, TRAIN_GRAPHS_REGION,
            BUCKETS, *(f"{BUCKETS}_{kind.upper()}" for kind in KINDS), BUCKETS_GROUP, FP8,
            FP8_STATS)


#: The prefixes whose every ``<prefix>_...`` variable is one of :func:`names` or misspelt.
FAMILIES = (FAST, BUCKETS, FP8)


def unknown_names(environ: Mapping[str, str]) -> list[SettingError]:
    """Variables named like these settings that none of them is (``HPU_PLUGIN_FAST_FUSED_
    OPTIMIZER``): a misspelt switch would otherwise be ignored, and the fast path it was
    meant to turn off would run."""
    known = names()
    found = []
    for variable in sorted(environ):
        family = next((f for f in FAMILIES if variable.startswith(f"{f}_")), None)
        if family is None or variable in known:
            continue
        siblings = [name for name in known if name.startswith(f"{family}_")]
        close = difflib.get_close_matches(variable.removeprefix(f"{family}_"), [
            name.removeprefix(f"{family}_") for name in siblings], n=1)
        fix = (f"did you mean {family}_{close[0]}? " if close else "") + f"unset {variable}"
        found.append(SettingError(
            variable, environ[variable], ", ".join(siblings), fix=fix,
            message=f"{variable}={quoted(environ[variable])} names no setting of "
            f"hpu-plugin; the settings named "
            f"{family}_... are {', '.join(siblings)}; fix: {fix}"))
    return found


#: Every other ``HPU_PLUGIN_*`` variable hpu-plugin and its emulator read (switches, the
#: emulator, timeouts); ``tests/faults/test_misspelt_settings.py`` keeps it whole.
OTHER_VARIABLES: tuple[str, ...] = (
    "HPU_PLUGIN_DISABLE", "HPU_PLUGIN_ONLY", "HPU_PLUGIN_NO_THIRD_PARTY", "HPU_PLUGIN_TRACE",
    "HPU_PLUGIN_IMPORT_BUDGET", "HPU_PLUGIN_EMULATE", "HPU_PLUGIN_EMULATE_DEVICES",
    "HPU_PLUGIN_EMULATE_MODULES", "HPU_PLUGIN_EMULATE_MEMORY", "HPU_PLUGIN_CACHE_DIR",
    "HPU_PLUGIN_HLSMI_TIMEOUT", "HPU_PLUGIN_PREFLIGHT_TIMEOUT", "HPU_PLUGIN_BUILD_LOCK_TIMEOUT",
    "HPU_PLUGIN_SELFTEST_FAULT",
)


def misspelt(environ: Mapping[str, str]) -> list[SettingError]:
    """``HPU_PLUGIN_*`` variables that are no setting of hpu-plugin but nearly one
    (``HPU_PLUGIN_DISABLED``, ``HPU_PLUGIN_EMULATE_DEVICE``): each would be ignored, and the
    setting its writer meant would not apply. A name far from every known one is left alone
    (it may be another tool's); the families' names are :func:`unknown_names`'s."""
    known = (*OTHER_VARIABLES, *names())
    found = []
    for name in sorted(environ):
        if (not name.startswith("HPU_PLUGIN_") or name in known
                or any(name.startswith(f"{family}_") for family in FAMILIES)):
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
        if close:
            fix = f"rename it {close[0]}, or unset {name}"
            found.append(SettingError(
                name, environ[name], f"the variables hpu-plugin reads, e.g. {close[0]}", fix,
                message=f"{name} is no setting of hpu-plugin (did you mean {close[0]}?); "
                f"fix: {fix}"))
    return found


def faults(environ: Mapping[str, str]) -> list[SettingError]:
    """Every one of these settings that holds a value no parser above accepts, and every
    variable named like one that none is, in a fixed order; empty when all are usable."""
    checks: list[Callable[[], object]] = [
        *(functools.partial(fast_switch, variable, environ)
          for variable in (FAST, *(f"{FAST}_{name}" for name in FAST_NAMES))),
        functools.partial(graph_budget, environ),
        functools.partial(train_graphs_region, environ),
        functools.partial(buckets_on, environ),
        *(functools.partial(bucket_sizes, kind, environ) for kind in KINDS),
        functools.partial(group_rows, environ),
        functools.partial(fp8_mode, environ),
        functools.partial(fp8_stats, environ),
    ]
    found = unknown_names(environ)
    for check in checks:
        try:
            check()
        except SettingError as exc:
            found.append(exc)
    return found
