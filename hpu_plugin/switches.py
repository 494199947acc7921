"""Which plugins may load: the ``HPU_PLUGIN_*`` switches, read and validated once.

``HPU_PLUGIN_DISABLE`` (names, or ``1`` for the whole package), ``HPU_PLUGIN_ONLY``,
``HPU_PLUGIN_NO_THIRD_PARTY``, ``HPU_PLUGIN_IMPORT_BUDGET`` and ``HPU_PLUGIN_TRACE`` (pluggy's
own tracing: which plugin decided what, without a debugger). A name is an entry-point name as
``hpu-plugin plugins`` lists it, or ``distribution:name`` to pick one distribution's plugin.
A value that cannot be used raises :class:`SettingError` naming the variable and the form.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from hpu_plugin import settings
from hpu_plugin.errors import SettingError, quoted
from hpu_plugin.loader import PluginRecord, normalise

ENV_DISABLE = "HPU_PLUGIN_DISABLE"
ENV_ONLY = "HPU_PLUGIN_ONLY"
ENV_NO_THIRD_PARTY = "HPU_PLUGIN_NO_THIRD_PARTY"
ENV_IMPORT_BUDGET = "HPU_PLUGIN_IMPORT_BUDGET"
ENV_TRACE = "HPU_PLUGIN_TRACE"
#: Seconds a plugin's import (inside every ``import torch``) may take before it is reported,
#: and the longest budget accepted.
DEFAULT_IMPORT_BUDGET, MAX_IMPORT_BUDGET = 2.0, 600.0

#: Characters an entry-point name may have if a comma-separated switch is to name it.
NAME = re.compile(r"^[\w.+-]+$")
_QUALIFIED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*):([\w.+-]+)$")
_FORM = ("plugin names as `hpu-plugin plugins` shows them, or distribution:name, "
         "separated by commas")


def disable_value(record: PluginRecord) -> str:
    """The ``HPU_PLUGIN_DISABLE`` value that turns off exactly this plugin (the fix
    ``hpu-plugin doctor`` prints); "" for a name no list can hold (it never loads)."""
    value = f"{normalise(record.distribution)}:{record.name}"
    if _QUALIFIED.match(value):
        return value
    return record.name if NAME.match(record.name) else ""  # unwritable: refused at load


def names(environ: Mapping[str, str], variable: str) -> frozenset[str]:
    """The names a comma-separated switch lists (empty for unset or an off word)."""
    raw = environ.get(variable, "")
    if settings.is_off(raw):
        return frozenset()
    listed = [part.strip() for part in raw.split(",") if part.strip()]
    setting = f"{variable}={quoted(raw)}"
    for name in listed:
        if name.lower() in settings.ON_WORDS:
            raise SettingError(variable, raw, _FORM, message=
                f"{setting} mixes the switch {quoted(name)} with plugin names: set "
                f"{variable}=1 alone to turn hpu-plugin off, or list only {_FORM}."
                if variable == ENV_DISABLE
                else f"{setting} contains {quoted(name)}, which is a switch value, not a "
                f"plugin name: list {_FORM}, or unset it."
            )
        if not NAME.match(name) and not _QUALIFIED.match(name):
            raise SettingError(variable, raw, _FORM, message=
                f"{setting}: {quoted(name)} cannot be a plugin name (letters, digits, "
                f"'_', '-', '.' and '+' only): list {_FORM}."
            )
    if not listed:
        raise SettingError(variable, raw, _FORM,
                           message=f"{setting} names no plugin: list {_FORM}, or unset {variable}.")
    return frozenset(_canonical(name) for name in listed)


def _canonical(name: str) -> str:
    match = _QUALIFIED.match(name)
    return f"{normalise(match.group(1))}:{match.group(2)}" if match else name


def _matches(listed: frozenset[str], record: PluginRecord) -> bool:
    return bool({record.name, f"{normalise(record.distribution)}:{record.name}"} & listed)


@dataclass(frozen=True)
class Selection:
    """Which plugins may load, from the environment switches."""

    disabled: frozenset[str] = frozenset()
    only: frozenset[str] | None = None
    third_party: bool = True
    import_budget: float = DEFAULT_IMPORT_BUDGET
    #: ``HPU_PLUGIN_DISABLE=1``: a registry built anyway (``hpu-plugin plugins``) shows
    #: every plugin disabled rather than pretending.
    package_off: bool = False
    trace: bool = False

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> Selection:
        """Read and validate every switch; raise :class:`SettingError` on a bad one."""
        package_off = settings.is_on(environ.get(ENV_DISABLE))
        disabled = frozenset() if package_off else names(environ, ENV_DISABLE)
        only = names(environ, ENV_ONLY) if ENV_ONLY in environ else None
        if only is not None and not only:
            only = None  # HPU_PLUGIN_ONLY=0 / off / empty: no allowlist
        no_third = settings.switch(ENV_NO_THIRD_PARTY, environ.get(ENV_NO_THIRD_PARTY))
        budget = settings.seconds(ENV_IMPORT_BUDGET, environ.get(ENV_IMPORT_BUDGET),
                                  DEFAULT_IMPORT_BUDGET, MAX_IMPORT_BUDGET)
        trace = settings.switch(ENV_TRACE, environ.get(ENV_TRACE))
        return cls(disabled=disabled, only=only, third_party=not no_third,
                   import_budget=budget, package_off=package_off, trace=trace)

    def refuses(self, record: PluginRecord) -> str | None:
        """Why the plugin of ``record`` must not load, or ``None`` when it may."""
        if self.package_off:
            return f"{ENV_DISABLE}=1 turns hpu-plugin off"
        if _matches(self.disabled, record):
            return f"disabled by {ENV_DISABLE}"
        if self.only is not None and not _matches(self.only, record):
            return f"not in {ENV_ONLY}"
        if not record.first_party and not self.third_party:
            return f"third-party plugins off ({ENV_NO_THIRD_PARTY})"
        return None

    def unknown(self, records: list[PluginRecord]) -> dict[str, list[str]]:
        """Names a switch lists that match no installed plugin, per switch (likely typos)."""
        found: dict[str, list[str]] = {}
        for variable, listed in ((ENV_DISABLE, self.disabled),
                                 (ENV_ONLY, self.only or frozenset())):
            missing = sorted(name for name in listed
                             if not any(_matches(frozenset({name}), r) for r in records))
            if missing:
                found[variable] = missing
        return found
