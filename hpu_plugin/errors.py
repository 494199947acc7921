"""The plugin's error types: one base, a bad setting, a refusal.

Every error here crosses processes whole: Ray, multiprocessing and launchers carry a
worker's exception by pickle, which rebuilds it as ``cls(*args)`` and so fails for an
``__init__`` that takes fields ("Failed to deserialize exception", a pool that waits for
ever). :class:`HpuPluginError` rebuilds without calling ``__init__`` and restores every
field and note. Imports nothing of the package.
"""

from __future__ import annotations

import copyreg


class HpuPluginError(Exception):
    """Base of every error the plugin raises on purpose; survives pickle with its fields."""

    def __reduce__(self) -> tuple[object, ...]:
        return copyreg.__newobj__, (type(self), *self.args), self.__dict__


def quoted(value: str, limit: int = 120) -> str:
    """A setting's value as an error echoes it: quoted, and cut when long, so a 100 kB
    value (a pasted file, a runaway script) cannot bury the message and its fix."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value)} characters)"


class SettingError(HpuPluginError, ValueError):
    """An environment variable holds a value the plugin cannot use.

    ``variable``, ``value``, ``accepted`` and ``fix`` are kept for diagnostics
    (``hpu-plugin doctor`` prints them as a finding with a fix). ``message`` replaces the
    generic text where the caller can say more precisely what is wrong.
    """

    def __init__(self, variable: str, value: str, accepted: str, fix: str = "",
                 message: str = "") -> None:
        self.variable, self.value, self.accepted = variable, value, accepted
        self.fix = fix or f"set {variable} to {accepted}, or unset it"
        super().__init__(message or f"{variable}={quoted(value)} is not usable; "
                         f"accepted: {accepted}; fix: {self.fix}")


class Refusal(HpuPluginError, ValueError):
    """Raised by a hook to refuse a request that cannot work on the device.

    Unlike any other exception, which the registry treats as a plugin fault (reported,
    skipped), a refusal reaches the user before work starts. Its message must name the
    input at fault and the fix.
    """
