"""Stand-in for ``habana_frameworks.torch.internal.bridge_config``: the bridge's flags as its
own code reads them.

The bridge generates this module from ``scripts/env_flags.yaml``: ``get_<flag>()`` for every
flag and ``set_<flag>(value)`` for the settable ones, each flag taken from the environment
when set there, else its default, and ``env_setting(name, value)``, a context that sets a flag
and restores it. A flag's getter answers the flag, not what the bridge decides from it:
``get_pt_enable_int64_support()`` is False when the variable is unset, although eager mode
then keeps int64 on the device (``common/eager/utils.cpp``, ``IsInt64Supported``).

The flags here are the ones code outside the bridge reads (the bridge's own tests); another
name raises AttributeError naming the ones there are. Setting a flag changes what its getter
answers; the emulator's behaviour follows the environment it started with.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hpu_plugin.settings import gaudi_flag

#: name: (default, settable); the default's type is the flag's type.
FLAGS: dict[str, tuple[Any, bool]] = {
    "PT_HPU_GPU_MIGRATION": (False, False),
    "PT_ENABLE_INT64_SUPPORT": (False, True),
    "PT_HPU_ENABLE_REFINE_DYNAMIC_SHAPES": (False, True),
    "PT_COMPILATION_STATS_PATH": ("", True),
    "PT_ENABLE_COMM_GROUP_CACHE": (True, False),
    "PT_HPU_GRAPH_DUMP_MODE": ("", True),
    "PT_HPU_GRAPH_DUMP_PREFIX": (".graph_dumps", False),
    "PT_HPU_LAZY_MODE": (1, False),
    "PT_HPU_PLACE_ON_CPU": ("", False),
    "PT_HPU_ENABLE_RECORD_STREAM": (False, False),
}

_set: dict[str, Any] = {}


def _read(name: str) -> Any:
    if name in _set:
        return _set[name]
    default, _ = FLAGS[name]
    raw = os.environ.get(name)
    if raw is None:
        return default
    if isinstance(default, bool):
        return gaudi_flag(raw)
    if isinstance(default, int):
        return int(raw)
    return raw


def _getter(name: str) -> Any:
    def get() -> Any:
        return _read(name)

    get.__name__ = f"get_{name.lower()}"
    return get


def _setter(name: str) -> Any:
    default, _ = FLAGS[name]

    def set_(value: Any) -> None:
        _set[name] = type(default)(value)

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
