"""Stand-in for ``habana_frameworks.torch.internal.bridge_config``: the bridge's flags as its
own code reads them.

The bridge generates this module from ``scripts/env_flags.yaml``: ``get_<flag>()`` for every
flag and ``set_<flag>(value)`` for the settable ones, each flag taken from the environment
when set there, else its default, and ``env_setting(name, value)``, a context that sets a flag
and restores it. A flag's getter answers the flag, not what the bridge decides from it:
``get_pt_enable_int64_support()`` is False when the variable is unset, although eager mode
then keeps int64 on the device (``common/eager/utils.cpp``, ``IsInt64Supported``).

The flags are ``hpu_emulator.bridge_flags``' (the ones code outside the bridge reads, the
bridge's own tests among it), shared with ``torch.hpu``'s switches; another name raises
AttributeError naming the ones there are.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hpu_emulator.bridge_flags import FLAGS, read, write


def _getter(name: str) -> Any:
    def get() -> Any:
        return read(name)

    get.__name__ = f"get_{name.lower()}"
    return get


def _setter(name: str) -> Any:
    def set_(value: Any) -> None:
        write(name, value)

    set_.__name__ = f"set_{name.lower()}"
    return set_


for _name, (_default, _settable) in FLAGS.items():
    globals()[f"get_{_name.lower()}"] = _getter(_name)
    if _settable:
        globals()[f"set_{_name.lower()}"] = _setter(_name)


@contextmanager
def env_setting(var: str, val: Any) -> Iterator[None]:
    """Set flag ``var`` to ``val`` for the block, as the bridge's generated helper does."""
    get_func = globals()["get_" + var.lower()]
    set_func = globals()["set_" + var.lower()]
    current = get_func()
    set_func(val)
    yield
    set_func(current)


def __getattr__(name: str) -> Any:
    raise AttributeError(
        f"habana_frameworks.torch.internal.bridge_config (hpu_plugin emulator) has no {name!r}: "
        f"the emulator carries the flags {sorted(FLAGS)}")
