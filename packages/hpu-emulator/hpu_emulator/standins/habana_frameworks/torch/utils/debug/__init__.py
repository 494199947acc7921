"""Stand-in for ``habana_frameworks.torch.utils.debug``: the bridge's debug API over its
``_debug_C`` bindings (``utils/_debug_C.py`` here).

What has an emulated counterpart acts as the bridge does: ``_bridge_cleanup`` forgets every
compiled recipe (the next run of a graph compiles again), ``get_tensor_info`` gives an
``hpu`` tensor's storage address and size (``None`` for another device), the log levels
and messages follow the bridge's loggers. The graph compiler's switches, memory dumps and
eager-cache statistics have nothing to act on here (each op runs its CPU kernel; there is
no eager graph cache and no host fallback) and answer empty.
"""

from typing import Any

import torch
from habana_frameworks.torch.utils import _debug_C
from habana_frameworks.torch.utils.debug.logger import Logger
from habana_frameworks.torch.utils.internal import is_lazy

from hpu_emulator import recipes as _recipes

__all__ = ["Logger", "get_tensor_info", "is_lazy"]


def _get_fallback_op_count() -> dict[str, int]:
    return _debug_C.get_fallback_op_count()


def _get_shape_agnostic_unsupported_ops() -> set[str]:
    return _debug_C.get_shape_agnostic_unsupported_ops()


def _get_eager_compiler_unsupported_op_prefixes() -> set[str]:
    return _debug_C.get_eager_compiler_unsupported_op_prefixes()


def _get_jit_cache_size() -> int:
    return _debug_C.get_jit_cache_size()


def _clear_jit_cache() -> None:
    return _debug_C.clear_jit_cache()


def _flush_disk_cache() -> None:
    _debug_C._disk_cache_flush()


def _set_dynamic_mode() -> None:
    _debug_C.set_dynamic_mode()


def _set_module_name(name: str = "") -> None:
    _debug_C.set_module_name(name)


def _switch(binding: str) -> Any:
    def switch(flag: bool) -> None:
        getattr(_debug_C, binding)(flag)

    switch.__name__ = f"_{binding}"
    return switch


_enable_eliminate_common_subexpression = _switch("enable_eliminate_common_subexpression")
_enable_eliminate_dead_code = _switch("enable_eliminate_dead_code")
_enable_constant_pooling = _switch("enable_constant_pooling")
_enable_peephole_optimization = _switch("enable_peephole_optimization")
_enable_fuse_t_mm_optimization = _switch("enable_fuse_t_mm_optimization")
_enable_fuse_bn_relu_optimization = _switch("enable_fuse_bn_relu_optimization")
_enable_bn_param_recalculation = _switch("enable_bn_param_recalculation")
_enable_fuse_conv_bn_optimization = _switch("enable_fuse_conv_bn_optimization")
_enable_permute_pass = _switch("enable_permute_pass")
_enable_replace_inplace_ops = _switch("enable_replace_inplace_ops")
_enable_replace_views = _switch("enable_replace_views")


def _is_enabled_weight_permute_pass() -> bool:
    return False


def _memstat_livealloc(msg: str = "") -> None:
    _debug_C.memstat_livealloc(msg)


def _memstat_devmem_start_collect(msg: str = "", show_cs: bool = True) -> None:
    _debug_C.memstat_devmem_start_collect(msg, show_cs)


def _memstat_devmem_stop_collect(msg: str = "") -> None:
    _debug_C.memstat_devmem_stop_collect(msg)


def _dump_refined_recipe_stat() -> None:
    _debug_C.dump_refined_recipe_stat()


def _disable_bucket_refinement() -> None:
    _debug_C.disable_bucket_refinement()


def _dump_bucket_memory_stat() -> None:
    _debug_C.dump_bucket_memory_stat()


def _dump_history_memory_stat() -> None:
    _debug_C.dump_history_memory_stat()


def _dump_recipe_memory_stat() -> None:
    _debug_C.dump_recipe_memory_stat()


def _dump_synapse_recipe_memory_stat() -> None:
    _debug_C.dump_synapse_recipe_memory_stat()


def _dump_dynamic_shape_memory_stat() -> None:
    _debug_C.dump_dynamic_shape_memory_stat()


def load_ds_checkpoint(path: str) -> None:
    _debug_C.load_ds_checkpoint(path)


def save_ds_checkpoint(path: str) -> None:
    _debug_C.save_ds_checkpoint(path)


def _is_enabled_synapse_layout_handling() -> bool:
    return True


def clear_dynamic_bucket_recipe_info() -> None:
    _debug_C.clear_dynamic_bucket_recipe_info()


def _is_enabled_lazy_collectives() -> bool:
    return _debug_C.is_enabled_lazy_collectives()


def _hb_print(msg: str) -> None:
    _debug_C.hb_print(msg)


def _mem_log(msg: str) -> None:
    _debug_C.mem_log(msg)


def _hg_print(msg: str) -> None:
    _debug_C.hg_print(msg)


def _bridge_cleanup() -> None:
    """Forget the compiled recipes, as the bridge's clean-up of its recipe cache: the next
    run of any graph compiles again (``graph_compilation`` counts it)."""
    _recipes.clear()


def get_tensor_info(tensor: torch.Tensor) -> tuple[int, int] | None:
    """``(address, bytes)`` of an ``hpu`` tensor's storage (its base's, for a view)."""
    if "hpu" not in str(tensor.device):
        return None
    storage = tensor.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


def _dump_memory_reporter() -> None:
    _debug_C.dump_memory_reporter()


def _towl_configure(flag: bool, config: str = "") -> None:
    _debug_C.towl_configure(flag, config)


def _towl_print(text: str) -> None:
    _debug_C.towl_print(text)
