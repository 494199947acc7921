"""One parser for every environment value the plugin reads: switches, numbers, sizes, times.

Each parser takes the variable's name and its raw text and returns the value or raises
:class:`SettingError`, whose message names the variable, quotes the value and states the
accepted form, so the user can act on it. Digits are ASCII only: ``int("٣")`` is 3 in
Python, but no launcher or shell means it, and a value that only Python reads as a number
is a typo to report, not a setting to guess at.

Depends on nothing else in the package (it runs inside ``import torch``), and imports
nothing heavier than ``re``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from hpu_plugin.errors import SettingError

#: Words that turn a switch on or off, in any case. The one home of these sets: the
#: registry, activation and the emulator's configuration all read them here.
ON_WORDS: frozenset[str] = frozenset({"1", "true", "yes", "on"})
OFF_WORDS: frozenset[str] = frozenset({"", "0", "false", "no", "off"})
#: Words the Gaudi bridge itself takes as "on" for its own flags (``PT_HPU_METRICS_GC_DETAILS``,
#: ``PT_HPU_ENABLE_CACHE_METRICS``): the emulator reads those flags exactly as Gaudi does,
#: so a value that is on (or off) on Gaudi is on (or off) here too.
GAUDI_FLAG_WORDS: frozenset[str] = frozenset({"y", "yes", "t", "true", "on", "1"})

#: Longest text a number may have: Python's ``int()`` on thousands of digits is slow and
#: its float overflows; no sensible setting needs more.
MAX_DIGITS = 30
#: Largest memory size accepted (1 PiB): the emulator's runtime keeps sizes in int64 and
#: adds them up; far above any Gaudi (128 GiB), far below overflow.
MAX_SIZE = 1024**5
#: Smallest memory size accepted: a device must hold at least one small tensor.
MIN_SIZE = 1024**2

SIZE_UNITS: dict[str, int] = {
    "": 1, "b": 1, "k": 1024, "kb": 1000, "kib": 1024, "m": 1024**2, "mb": 1000**2,
    "mib": 1024**2, "g": 1024**3, "gb": 1000**3, "gib": 1024**3, "t": 1024**4,
    "tb": 1000**4, "tib": 1024**4,
}

# Patterns as text, compiled (and cached by ``re``) on first use: this module is imported
# inside every ``import torch``, where compiling them up front cost about 2 ms.
_INTEGER = r"[+-]?[0-9]+"
_DECIMAL = r"[0-9]+(?:\.[0-9]+)?|\.[0-9]+"
_SIZE = r"([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)"


def switch(variable: str, raw: str | None, default: bool = False, fix: str = "") -> bool:
    """An on/off switch: one of :data:`ON_WORDS` or :data:`OFF_WORDS` (any case, spaces
    around ignored); ``default`` when unset. ``fix`` replaces the generic advice where the
    caller knows what each value does."""
    if raw is None:
        return default
    word = raw.strip().lower()
    if word in ON_WORDS:
        return True
    if word in OFF_WORDS:
        return False
    raise SettingError(variable, raw, "1/true/yes/on or 0/false/no/off (any case)", fix)


def gaudi_flag(raw: str | None) -> bool:
    """One of the Gaudi bridge's own flags, read as the bridge reads it: on for a
    :data:`GAUDI_FLAG_WORDS` word (any case), off for anything else; never an error, since
    Gaudi raises none for these."""
    return raw is not None and raw.strip().lower() in GAUDI_FLAG_WORDS


def is_on(raw: str | None) -> bool:
    """Lenient reading for places that must never raise (activation's first look): only an
    :data:`ON_WORDS` value is on."""
    return raw is not None and raw.strip().lower() in ON_WORDS


def is_off(raw: str | None) -> bool:
    """Unset or an :data:`OFF_WORDS` value."""
    return raw is None or raw.strip().lower() in OFF_WORDS


def emulation_requested(environ: Mapping[str, str] = os.environ) -> bool:
    """``HPU_PLUGIN_EMULATE`` read leniently, as activation must (it never
    raises); the emulator's configuration reports a bad value with its fix."""
    return not is_off(environ.get("HPU_PLUGIN_EMULATE"))


def integer(variable: str, raw: str, minimum: int | None = None,
            maximum: int | None = None, fix: str = "") -> int:
    """A whole number in ASCII digits (optional sign), within ``[minimum, maximum]``.
    ``fix`` replaces the generic advice where the caller knows a better one."""
    text = raw.strip()
    accepted = _range_text("an integer", minimum, maximum)
    if len(text) > MAX_DIGITS or not re.fullmatch(_INTEGER, text, re.ASCII):
        raise SettingError(variable, raw, accepted + " in ASCII digits", fix)
    value = int(text)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise SettingError(variable, raw, accepted, fix)
    return value


def ascending(variable: str, raw: str, fix: str = "") -> tuple[int, ...]:
    """A comma-separated list of positive whole numbers in ASCII digits, strictly ascending
    (``128,256,512``; spaces ignored), as sizes to round up to are given."""
    accepted = "strictly ascending positive integers in ASCII digits, comma-separated"
    parts = [part.strip() for part in raw.split(",") if part.strip()]
    if not parts or any(len(p) > MAX_DIGITS or not re.fullmatch(r"[0-9]+", p, re.ASCII)
                        for p in parts):
        raise SettingError(variable, raw, accepted, fix)
    values = tuple(int(part) for part in parts)
    if values[0] <= 0 or list(values) != sorted(set(values)):
        raise SettingError(variable, raw, accepted, fix)
    return values


def rank(variable: str, raw: str) -> int:
    """``LOCAL_RANK``-like: a non-negative integer in ASCII digits, as launchers set it."""
    text = raw.strip()
    if len(text) > MAX_DIGITS or not re.fullmatch(r"[0-9]+", text, re.ASCII):
        raise SettingError(
            variable, raw, "a non-negative integer in ASCII digits",
            f"let the launcher (torchrun, accelerate launch, mpirun) set {variable}, or "
            "unset it",
        )
    return int(text)


def seconds(variable: str, raw: str | None, default: float,
            maximum: float = 7 * 24 * 3600) -> float:
    """A positive, finite number of seconds (``2``, ``0.5``); ``default`` when unset/blank."""
    if raw is None or not raw.strip():
        return default
    text = raw.strip()
    accepted = (f"a number of seconds above 0 and at most {maximum:g}, in ASCII digits "
                f"(e.g. {default:g} or 0.5)")
    if len(text) > MAX_DIGITS or not re.fullmatch(_DECIMAL, text, re.ASCII):
        raise SettingError(variable, raw, accepted,
                           f"set it to e.g. {default:g}, or unset it for the default "
                           f"of {default:g} s")
    value = float(text)
    if not 0 < value <= maximum:
        raise SettingError(variable, raw, accepted,
                           f"set it to e.g. {default:g}, or unset it for the default "
                           f"of {default:g} s")
    return value


def size(variable: str, raw: str, minimum: int = MIN_SIZE, maximum: int = MAX_SIZE) -> int:
    """A memory size in whole bytes: a number with an optional unit (``96GiB``, ``512MiB``,
    ``1.5GiB``, ``1073741824``), from ``minimum`` to ``maximum`` bytes."""
    accepted = (f"a whole number of bytes from {_bytes_text(minimum)} to "
                f"{_bytes_text(maximum)}, as a number with an optional unit "
                "(B, KiB, MiB, GiB, TiB, KB, MB, GB, TB), e.g. 96GiB, 512MiB, 1073741824")
    match = re.fullmatch(_SIZE, raw.strip(), re.ASCII)
    if match is None or len(match.group(1)) > MAX_DIGITS:
        raise SettingError(variable, raw, accepted)
    unit = match.group(2).lower()
    if unit not in SIZE_UNITS:
        raise SettingError(variable, raw, accepted)
    whole, _, fraction = match.group(1).partition(".")
    scale = 10 ** len(fraction)
    numerator = (int(whole) * scale + int(fraction or "0")) * SIZE_UNITS[unit]
    if numerator % scale:
        raise SettingError(variable, raw, accepted)
    value = numerator // scale
    if not minimum <= value <= maximum:
        raise SettingError(variable, raw, accepted)
    return value


def _range_text(what: str, minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f"{what} from {minimum} to {maximum}"
    if minimum is not None:
        return f"{what} of at least {minimum}"
    if maximum is not None:
        return f"{what} of at most {maximum}"
    return what


def _bytes_text(value: int) -> str:
    for unit, factor in (("PiB", 1024**5), ("TiB", 1024**4), ("GiB", 1024**3),
                         ("MiB", 1024**2), ("KiB", 1024)):
        if value >= factor and value % factor == 0:
            return f"{value // factor} {unit}"
    return f"{value} bytes"
