"""Stand-in for ``habana_frameworks.torch.dynamo.compile_backend.shared_layer``: which node of
a graph ``hpu_backend`` compiles leaves the device graph to run eagerly, and its log.

The bridge asks this per node as it partitions a graph. Modelled here are its own rules: an
op in ``hpu_fallback_op_list`` (which code may extend), ``permute`` giving int64, an op of
``hpu_ds_fallback_list`` in a graph with symbolic sizes, a NaN among the non-tensor
arguments. Its further question to the graph compiler's op tables is not: every other op
counts as supported. The answer changes no result on the emulator (every op runs its CPU
kernel either way); it is what ``FxGraphAnalyzer`` counts as ``eager_count`` and what the
``Node: ... requires fallback: ...`` log lines say, and, with ``config.use_eager_fallback``
off, a node that would fall back is refused with the bridge's assertion.
"""

from typing import Any

import torch
from habana_frameworks.torch.dynamo.compile_backend import config as hpu_backend_config
from habana_frameworks.torch.dynamo.debug_utils.logger import get_compile_backend_logger

from hpu_emulator import dynamo as _dynamo

logger = get_compile_backend_logger()

#: Ops the bridge always runs outside its graphs (random-state ops, a few it cannot infer).
hpu_fallback_op_list = {
    "seed", "manual_seed", "initial_seed", "get_rng_state", "set_rng_state",
    "slice_backward", "addcmul", "index", "nonzero", "_unique2", "bincount",
}
#: Ops that fall back in a graph with symbolic sizes (the fused SDPA variants).
hpu_ds_fallback_list = {
    "sdpa_fwd", "sdpa_fwd_dropout", "sdpa_fwd_non_dropout", "sdpa_fwd_dropout_seed", "sdpa_bwd",
    "sdpa_recomp_fwd", "sdpa_recomp_fwd_dropout", "sdpa_recomp_fwd_non_dropout",
    "sdpa_recomp_fwd_dropout_seed", "sdpa_recomp_bwd", "fp8_sdpa_recomp_fwd",
}
#: Where ``is_eager_fallback_required`` leaves its answer for ``FxGraphAnalyzer``.
META_KEY = "hpu_eager_fallback"


def _values(node: torch.fx.Node) -> list[Any]:
    value = node.meta.get("val")
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _output_device(node: torch.fx.Node) -> torch.device | None:
    tensor = next((v for v in _values(node) if isinstance(v, torch.Tensor)), None)
    return tensor.device if tensor is not None else None


def _is_dynamic(node: torch.fx.Node) -> bool:
    return any(isinstance(v, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in v.shape)
               for v in _values(node))


def check_for_default_fallback(op_name: str, node: torch.fx.Node, is_dynamic: bool = False
                               ) -> bool:
    if op_name in hpu_fallback_op_list:
        return True
    if op_name == "permute" and any(isinstance(v, torch.Tensor) and v.dtype == torch.int64
                                    for v in _values(node)):
        return True
    if op_name in hpu_ds_fallback_list and is_dynamic:
        return True
    # a NaN scalar argument (the bridge's JIT lowering cannot write it)
    return any(not torch.is_tensor(a) and isinstance(a, float) and a != a for a in node.args)


def is_eager_fallback_required(node: torch.fx.Node, is_dynamic: bool = False) -> bool:
    """The bridge's question for one ``call_function`` node, with its log line and, when
    ``use_eager_fallback`` is off, its assertion."""
    device = _output_device(node)
    do_fallback = False
    if device is not None and device.type == "hpu" and hasattr(node.target, "__name__"):
        op_name = node.target.__name__.split(".")[0]
        do_fallback = check_for_default_fallback(op_name, node, is_dynamic)
        if do_fallback:
            logger.warn("Fallback required. Node: %s Target: %s", node, node.target)
    logger.debug("Node: %s requires fallback: %s", node, do_fallback)
    assert hpu_backend_config.use_eager_fallback or not do_fallback, (
        f"Node: {node} requires fallback: {do_fallback}")
    return do_fallback


def _plain_index(node: torch.fx.Node) -> bool:
    """The bridge's pattern rewriter (``_passes/pattern_rewriter.py``) turns ``index.Tensor``
    of an hpu tensor into ``hpu::plain_index`` when every index is an hpu tensor of static
    size (no ``None``): ``index`` itself always falls back, ``plain_index`` does not."""
    if node.target is not torch.ops.aten.index.Tensor or len(node.args) < 2:
        return False
    source, indices = node.args[0], node.args[1]
    value = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor) or value.device.type != "hpu":
        return False
    if not isinstance(indices, (list, tuple)):
        return False
    for index in indices:
        index_value = index.meta.get("val") if isinstance(index, torch.fx.Node) else None
        if (not isinstance(index_value, torch.Tensor) or index_value.device.type != "hpu"
                or any(isinstance(size, torch.SymInt) for size in index_value.shape)):
            return False
    return True


def _partition(graph_module: torch.fx.GraphModule) -> None:
    """Ask for every node of a graph ``hpu_backend`` compiles, as the bridge's partitioner,
    after the one rewrite of its passes that changes the answer (``plain_index``)."""
    rewritten = False
    for node in graph_module.graph.nodes:
        if node.op == "call_function" and _plain_index(node):
            node.target = torch.ops.hpu.plain_index.default
            rewritten = True
    if rewritten:
        graph_module.recompile()
    for node in graph_module.graph.nodes:
        if node.op == "call_function":
            node.meta[META_KEY] = is_eager_fallback_required(node, _is_dynamic(node))


if _partition not in _dynamo.graph_observers:
    _dynamo.graph_observers.insert(0, _partition)  # before anything that reads the answers
