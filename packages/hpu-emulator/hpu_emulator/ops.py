"""The one owner of the emulator's ``torch.library`` registrations.

The emulator defines ops under ``torch.ops.hpu`` (the bridge's fused kernels, the
``dequantize_nf4`` it offers bitsandbytes) and overrides ATen kernels for the HPU key (the
faults of the real stack it models). Each part asks here for its ``Library``, under one lock,
and asks here whether an op is already defined (by the real bridge, or an earlier call), so
no two parts keep a lock or a probe of their own.
"""

from __future__ import annotations

import threading

import torch

#: The bridge's op namespace (``torch.ops.hpu.*``).
NAMESPACE = "hpu"

#: Held while a part checks for and makes its registrations; re-entrant, so a part may
#: register another part's ops while holding it.
lock = threading.RLock()
_libraries: dict[str, torch.library.Library] = {}


def defined(name: str, namespace: str = NAMESPACE) -> bool:
    """Is ``namespace::name`` defined in this process (by anyone)?"""
    try:
        torch._C._get_schema(f"{namespace}::{name}", "")
    except RuntimeError:
        return False
    return True


def registered(owner: str) -> bool:
    """Has ``owner`` (a part of the emulator) made its registrations?"""
    return owner in _libraries


def library(owner: str, namespace: str = NAMESPACE, kind: str = "FRAGMENT"
            ) -> torch.library.Library:
    """A new ``Library`` for ``owner``'s registrations, kept until :func:`drop`. Call with
    :data:`lock` held, after :func:`registered` said no; FRAGMENT, so that every part can
    define into the same namespace."""
    made = torch.library.Library(namespace, kind)
    _libraries[owner] = made
    return made


def drop(owner: str) -> None:
    """Take back ``owner``'s registrations (the kernels before them become active again)."""
    with lock:
        made = _libraries.pop(owner, None)
        if made is not None:
            made._destroy()
