"""The bridge's flags as its own code keeps them: one store that ``torch.hpu``'s switches and
the ``habana_frameworks.torch.internal.bridge_config`` stand-in both read and set.

The bridge (``scripts/env_flags.yaml``, ``GET_ENV_FLAG_NEW``/``SET_ENV_FLAG_NEW``) reads each
flag from the environment when it is set there, else takes its default, and a switch that
sets a flag changes what every reader sees afterwards (``torch.hpu.enable_dynamic_shape()``
sets ``PT_HPU_ENABLE_REFINE_DYNAMIC_SHAPES``, which ``get_dynamic_shape_status()`` and
``bridge_config.get_pt_hpu_enable_refine_dynamic_shapes()`` then answer). A flag here answers
its value, not what the bridge decides from it; the emulator's behaviour follows the
environment it started with.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from hpu_plugin.gaudi.environment import BRIDGE_BOOL

#: name: (default, settable from Python); the default's type is the flag's type.
FLAGS: dict[str, tuple[Any, bool]] = {
    "PT_HPU_GPU_MIGRATION": (False, False),
    "PT_ENABLE_INT64_SUPPORT": (False, True),
    "PT_HPU_ENABLE_REFINE_DYNAMIC_SHAPES": (False, True),
    "PT_HPU_OPTIM_DYNAMIC_OUTPUT_SIF": (True, False),
    "PT_COMPILATION_STATS_PATH": ("", True),
    "PT_ENABLE_COMM_GROUP_CACHE": (True, False),
    "PT_ENABLE_HABANA_STREAMASYNC": (True, False),
    "PT_HPU_GRAPH_DUMP_MODE": ("", True),
    "PT_HPU_GRAPH_DUMP_PREFIX": (".graph_dumps", False),
    "PT_HPU_LAZY_MODE": (1, False),
    "PT_HPU_PLACE_ON_CPU": ("", False),
    "PT_HPU_ENABLE_RECORD_STREAM": (False, False),
}

_lock = threading.Lock()
_set: dict[str, Any] = {}


def read(name: str) -> Any:
    """The flag's value: as set since start, else from the environment, else its default."""
    with _lock:
        if name in _set:
            return _set[name]
    default, _ = FLAGS[name]
    raw = os.environ.get(name)
    if raw is None:
        return default
    if isinstance(default, bool):
        if not raw:
            return default
        if raw.lower() not in BRIDGE_BOOL:  # the bridge stops the process here
            raise RuntimeError(f'Environment variable "{name}"="{raw}" couldn\'t be converted '
                               "properly")
        return BRIDGE_BOOL[raw.lower()]
    if isinstance(default, int):
        return int(raw)
    return raw


def write(name: str, value: Any) -> None:
    default, _ = FLAGS[name]
    with _lock:
        _set[name] = type(default)(value)
