"""Environment defaults the plugin applies, each only where the user set nothing."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

#: Transformers uses int64 token ids; Gaudi casts int64 to int32 unless this is on, and its
#: CI runs with it on (reference page). Eager mode is the documented default and the only
#: mode in which ``torch.compile`` works (Gaudi support matrix).
DEFAULTS: Mapping[str, str] = {
    "PT_ENABLE_INT64_SUPPORT": "1",
    "PT_HPU_LAZY_MODE": "0",
}


def apply_defaults(environ: MutableMapping[str, str]) -> dict[str, str]:
    """Set each default the user left unset; return what was set."""
    applied = {}
    for name, value in DEFAULTS.items():
        if name not in environ:
            environ[name] = value
            applied[name] = value
    return applied


def is_lazy(environ: Mapping[str, str]) -> bool:
    """Lazy mode, read as the Gaudi software reads it (default "1" in its Python code)."""
    return environ.get("PT_HPU_LAZY_MODE", "1") != "0"
