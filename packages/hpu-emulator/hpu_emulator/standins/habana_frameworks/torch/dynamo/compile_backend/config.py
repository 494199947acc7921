"""Stand-in for ``habana_frameworks.torch.dynamo.compile_backend.config``: the bridge's
``hpu_backend`` switches, with their environment variables and defaults, as a torch config
module (``patch``, ``save_config``) plus the dictionary-like ``configuration_flags``.

Code written for Gaudi saves a flag, sets it, compiles and puts it back (most often
``use_eager_fallback``). They steer the bridge's graph passes (partitioning, eager fallback,
in-place rewrites), which the emulator has none of: each compiled graph runs whole on eager
kernels, whatever the flags, so they are kept and read back, and change no result.
"""

import os
import sys
from typing import Any

from torch.utils._config_module import install_config_module

_TRUE = ("on", "1", "yes", "true", "y", "t")
_FALSE = ("off", "0", "no", "false", "n", "f")


def _flag(variable: str, default: str) -> bool:
    """A boolean switch from the environment; a value neither true nor false is refused, as
    the bridge refuses it (an assertion naming the variable)."""
    value = os.getenv(variable, default).lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise AssertionError(f"Unrecognized boolean value in env config:\n\t{variable}: {value}")


def _decomposition_mode() -> str:
    value = os.getenv("PT_HPU_COMPILE_DECOMPOSITION_MODE", "habana").lower()
    if value not in ("habana", "core_aten", "none"):
        raise AssertionError(
            "Unrecognized string value in env config:\n"
            f"\tPT_HPU_COMPILE_DECOMPOSITION_MODE: {value}\n"
            '\tRecognized values: "habana", "core_aten", "none"\n'
        )
    return value


use_compiled_recipes = _flag("PT_HPU_COMPILE_USE_RECIPES", "1")
decomposition_mode = _decomposition_mode()
keep_input_mutations = _flag("PT_HPU_KEEP_INPUT_MUTATIONS", "1")
use_eager_fallback = _flag("PT_HPU_USE_EAGER_FALLBACK", "1")
use_graph_freezing = _flag("PT_HPU_COMPILE_GRAPH_FREEZE", "0")
discard_frozen_params = _flag("PT_HPU_COMPILE_DISCARD_FROZEN_PARAMS", "0")
remove_unnecessary_clones = _flag("PT_HPU_COMPILE_REMOVE_UNNECESSARY_CLONES", "1")
use_inplace_allreduce = _flag("PT_HPU_USE_INPLACE_COLLECTIVE", "1")
use_inplace_index_copy = _flag("PT_HPU_USE_INPLACE_INDEX_COPY", "1")
inference = _flag("PT_HPU_USE_INFERENCE_COMPILER", "1")
enable_sfg = _flag("PT_HPU_ENABLE_SFG", "0")
use_cpp_partitioner = _flag("PT_HPU_USE_CPP_PARTITIONER", "1")
enable_allreduce_graph_split = _flag("PT_HPU_ENABLE_ALLREDUCE_GRAPH_SPLIT", "1")
force_static_compile = _flag("PT_HPU_FORCE_STATIC_COMPILE", "0")
reinplace_add = _flag("PT_HPU_REINPLACE_ADD", "1")
reassign_full_copy = _flag("PT_HPU_REASSIGN_FULL_COPY", "1")
reassign_copy_ = _flag("PT_HPU_REASSIGN_COPY_", "1")
use_boxed_input = _flag("PT_HPU_USE_BOXED_INPUT", "1")

install_config_module(sys.modules[__name__])


class _Flags:
    """``configuration_flags["name"]``: the same flags by key (the bridge's older API)."""

    def __getitem__(self, key: str) -> Any:
        return getattr(sys.modules[__name__], key)

    def __setitem__(self, key: str, value: Any) -> None:
        setattr(sys.modules[__name__], key, value)


configuration_flags = _Flags()
