"""One parser for every environment value the plugin reads: switches, numbers, times.

Each parser takes the variable's name and its raw text and returns the value, or raises
:class:`SettingError` naming the variable, quoting the value and stating the accepted form.
Digits are ASCII only: ``int("٣")`` is 3 in Python, but no shell means it. Imported inside
``import torch``, so it imports nothing heavier than ``re``, and compiles no pattern up front.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from hpu_plugin.errors import SettingError

#: Words that turn a switch on or off, in any case.
ON_WORDS: frozenset[str] = frozenset({"1", "true", "yes", "on"})
OFF_WORDS: frozenset[str] = frozenset({"", "0", "false", "no", "off"})
#: Words the Gaudi bridge takes as "on" for its own flags (``PT_HPU_METRICS_GC_DETAILS``...).
GAUDI_FLAG_WORDS: frozenset[str] = frozenset({"y", "yes", "t", "true", "on", "1"})

#: Longest text a number may have (``int()`` on thousands of digits is slow).
MAX_DIGITS = 30
_INTEGER = r"[+-]?[0-9]+"
_DECIMAL = r"[0-9]+(?:\.[0-9]+)?|\.[0-9]+"


def switch(variable: str, raw: str | None, default: bool = False, fix: str = "") -> bool:
    """An on/off switch (any case, spaces ignored); ``default`` when unset. ``fix`` replaces
    the generic advice where the caller knows what each value does."""
    if raw is None:
        return default
    word = raw.strip().lower()
    if word in ON_WORDS:
        return True
    if word in OFF_WORDS:
        return False
    raise SettingError(variable, raw, "1/true/yes/on or 0/false/no/off (any case)", fix)


def gaudi_flag(raw: str | None) -> bool:
    """One of the bridge's own flags, read as the bridge reads it: never an error."""
    return raw is not None and raw.strip().lower() in GAUDI_FLAG_WORDS


def is_on(raw: str | None) -> bool:
    """Lenient, for places that must never raise: only an :data:`ON_WORDS` value is on."""
    return raw is not None and raw.strip().lower() in ON_WORDS


def is_off(raw: str | None) -> bool:
    """Unset or an :data:`OFF_WORDS` value."""
    return raw is None or raw.strip().lower() in OFF_WORDS


def emulation_requested(environ: Mapping[str, str] = os.environ) -> bool:
    """``HPU_PLUGIN_EMULATE``, read leniently (the emulator reports a bad value)."""
    return not is_off(environ.get("HPU_PLUGIN_EMULATE"))


def integer(variable: str, raw: str, minimum: int | None = None,
            maximum: int | None = None, fix: str = "") -> int:
    """A whole number in ASCII digits (optional sign), within ``[minimum, maximum]``."""
    text = raw.strip()
    accepted = _range_text("an integer", minimum, maximum)
    if len(text) > MAX_DIGITS or not re.fullmatch(_INTEGER, text, re.ASCII):
        raise SettingError(variable, raw, accepted + " in ASCII digits", fix)
    value = int(text)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise SettingError(variable, raw, accepted, fix)
    return value


def ascending(variable: str, raw: str, fix: str = "") -> tuple[int, ...]:
    """Strictly ascending positive whole numbers, comma-separated (``128,256,512``)."""
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
    fix = f"set it to e.g. {default:g}, or unset it for the default of {default:g} s"
    if len(text) > MAX_DIGITS or not re.fullmatch(_DECIMAL, text, re.ASCII):
        raise SettingError(variable, raw, accepted, fix)
    value = float(text)
    if not 0 < value <= maximum:
        raise SettingError(variable, raw, accepted, fix)
    return value


def _range_text(what: str, minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f"{what} from {minimum} to {maximum}"
    if minimum is not None:
        return f"{what} of at least {minimum}"
    if maximum is not None:
        return f"{what} of at most {maximum}"
    return what

