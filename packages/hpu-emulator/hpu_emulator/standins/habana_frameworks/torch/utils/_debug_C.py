"""Stand-in for ``habana_frameworks.torch.utils._debug_C``: the bridge's debug bindings that
``utils.debug`` wraps and code written for Gaudi calls directly (its log levels most of all).

Logging follows the bridge's loggers: one level per ``PT_*`` logger, set from
``LOG_LEVEL_<logger>``, ``LOG_LEVEL_ALL_PT`` or ``LOG_LEVEL_ALL`` (the most specific wins,
levels 0 trace to 5 critical, 6 off) or by ``enable_logging`` with such a name. Python's
messages go to ``PT_PYTHON``: to ``$HABANA_LOGS/pytorch_log.txt`` when ``HABANA_LOGS`` is
set, and to standard error with ``ENABLE_CONSOLE=true``.

The graph compiler's switches and the recipe statistics have nothing to act on in the
emulator (every op runs its CPU kernel, nothing falls back to the host), so they answer
empty and change nothing.
"""

import enum
import os
import sys
import threading
import time
from typing import Any

#: The bridge's loggers (logging.h), each with its own level.
LOGGERS = (
    "PT_DEVICE", "PT_KERNEL", "PT_BRIDGE", "PT_SYNHELPER", "PT_DISTRIBUTED", "PT_LAZY",
    "PT_TRACE", "PT_FALLBACK", "PT_STATS", "PT_TEST", "PT_DYNAMIC_SHAPE", "PT_DEVMEM",
    "PT_HABHELPER", "PT_IRGRAPH", "PT_VIEWTABLE", "PT_REFINEMENT", "PT_HOSTSTAT", "PT_LAYOUTS",
    "PT_PARALLEL_ACC", "PT_LAZY_EAGER", "PT_MEMLOG", "PT_EXEC_THREAD", "PT_EAGER",
    "PT_RECIPE_STATS", "PT_CUSTOM", "PT_HPUGRAPH", "PT_CONST_SECTION", "PT_PYTHON", "PT_TOWL",
)
_DEFAULT_LEVEL = 5  # critical: only the worst is written unless asked for more
_OFF = 6


class log_level(enum.IntEnum):
    trace = 0
    debug = 1
    info = 2
    warn = 3
    error = 4
    critical = 5


trace, debug, info, warn, error, critical = tuple(log_level)


def _level_from_env(logger: str) -> int:
    for name in (f"LOG_LEVEL_{logger}", "LOG_LEVEL_ALL_PT", "LOG_LEVEL_ALL"):
        value = os.environ.get(name)
        if value is not None and value.strip().lstrip("-").isdigit():
            return int(value)
    return _DEFAULT_LEVEL


_levels = {logger: _level_from_env(logger) for logger in LOGGERS}
_write_lock = threading.Lock()


def enable_logging(logger_name: str, logger_level: int) -> None:
    """Set the level of the loggers ``logger_name`` names: ``LOG_LEVEL_ALL`` or
    ``LOG_LEVEL_ALL_PT`` all of them, ``LOG_LEVEL_PT_X`` (or ``PT_X``) one."""
    name = logger_name.removeprefix("LOG_LEVEL_")
    level = int(logger_level)
    if name in ("ALL", "ALL_PT"):
        for logger in _levels:
            _levels[logger] = level
    elif name in _levels:
        _levels[name] = level


def get_pt_logging_levels() -> dict[str, int]:
    return dict(_levels)


def is_log_python_enabled(level: int) -> bool:
    return int(level) >= _levels["PT_PYTHON"] and _levels["PT_PYTHON"] < _OFF


def _write(logger: str, level: int, message: str) -> None:
    stamp = time.strftime("%H:%M:%S", time.localtime())
    name = log_level(int(level)).name
    line = f"[{stamp}][{logger}][{name}][tid:{threading.get_native_id()}] {message}\n"
    directory = os.environ.get("HABANA_LOGS")
    with _write_lock:
        if directory:
            os.makedirs(directory, exist_ok=True)
            with open(os.path.join(directory, "pytorch_log.txt"), "a", encoding="utf-8") as log:
                log.write(line)
        if os.environ.get("ENABLE_CONSOLE", "").lower() in ("1", "true"):
            sys.stderr.write(line)


def log_python(level: int, message: str) -> None:
    """Write ``message`` to the bridge's log destinations (its level is checked by the
    caller, as the binding's caller does)."""
    _write("PT_PYTHON", level, message)


def get_fallback_op_count() -> dict[str, int]:
    """Ops the bridge ran on the host for want of a device kernel: none here."""
    return {}


def get_shape_agnostic_unsupported_ops() -> set[str]:
    return set()


def get_eager_compiler_unsupported_op_prefixes() -> set[str]:
    return set()


def get_jit_cache_size() -> int:
    """The eager graphs the bridge keeps compiled: the emulator compiles none."""
    return 0


def clear_jit_cache() -> None:
    """Nothing is kept to clear."""


def is_enabled_lazy_collectives() -> bool:
    return os.environ.get("PT_HPU_ENABLE_LAZY_COLLECTIVES", "0").lower() in ("1", "true")


def _no_effect(*args: Any, **kwargs: Any) -> None:
    """A switch or a dump of the graph compiler or of its statistics: nothing to act on."""


for _name in (
    "set_dynamic_mode", "set_module_name", "enable_eliminate_common_subexpression",
    "enable_eliminate_dead_code", "enable_constant_pooling", "enable_peephole_optimization",
    "enable_fuse_t_mm_optimization", "enable_fuse_bn_relu_optimization",
    "enable_bn_param_recalculation", "enable_fuse_conv_bn_optimization", "enable_permute_pass",
    "enable_replace_inplace_ops", "enable_replace_views", "memstat_livealloc",
    "memstat_devmem_start_collect", "memstat_devmem_stop_collect", "dump_refined_recipe_stat",
    "disable_bucket_refinement", "dump_bucket_memory_stat", "dump_history_memory_stat",
    "dump_recipe_memory_stat", "dump_synapse_recipe_memory_stat",
    "dump_dynamic_shape_memory_stat", "load_ds_checkpoint", "save_ds_checkpoint",
    "clear_dynamic_bucket_recipe_info", "mem_log", "dump_memory_reporter", "_disk_cache_flush",
    "towl_configure", "towl_print",
):
    globals()[_name] = _no_effect


def _debug_message(logger: str) -> Any:
    def write(message: str) -> None:
        if _levels[logger] <= log_level.debug:
            _write(logger, log_level.debug, message)

    return write


hb_print = _debug_message("PT_CUSTOM")
hg_print = _debug_message("PT_HPUGRAPH")
