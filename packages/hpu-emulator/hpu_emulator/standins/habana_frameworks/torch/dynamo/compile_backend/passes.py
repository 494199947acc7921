"""Stand-in for ``habana_frameworks.torch.dynamo.compile_backend.passes``: its logger and the
log of each graph ``hpu_backend`` compiles.

The bridge lowers each device graph to TorchScript and logs it at debug level under
``####PyTorch-generated JIT IR graph for this HPU graph:####``; its tests read the ops of
that log (``::add(``) to check what ran in a graph. The emulator compiles no TorchScript: it
logs the FX graph it runs in the same form, one line per op (``%add : Tensor =
aten::add(%x, %y)``), written only while the logger keeps its messages or debug logging is
on. The bridge's graph passes (rewrites, partitioning) are not modelled.
"""

import torch
from habana_frameworks.torch.dynamo.debug_utils.logger import get_compile_backend_logger
from habana_frameworks.torch.utils import _debug_C

from hpu_emulator import dynamo as _dynamo

logger = get_compile_backend_logger()


def _ir(graph_module: torch.fx.GraphModule) -> str:
    lines = ["graph(" + ", ".join(f"%{n.name}" for n in graph_module.graph.nodes
                                  if n.op == "placeholder") + "):"]
    for node in graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        schema = getattr(node.target, "_schema", None)
        name = schema.name if schema is not None else f"prim::{node.target.__name__}"
        args = ", ".join(f"%{a.name}" if isinstance(a, torch.fx.Node) else repr(a)
                         for a in node.args)
        lines.append(f"  %{node.name} : Tensor = {name}({args})")
    returns: list[torch.fx.Node] = []
    for node in graph_module.graph.nodes:
        if node.op == "output":
            torch.fx.node.map_arg(node.args, returns.append)
    lines.append("  return (" + ", ".join(f"%{n.name}" for n in returns) + ")")
    return "\n".join(lines)


def _log_graph(graph_module: torch.fx.GraphModule) -> None:
    if logger.store_data or _debug_C.is_log_python_enabled(_debug_C.log_level.debug):
        logger.debug("####PyTorch-generated JIT IR graph for this HPU graph:####\n%s",
                     _ir(graph_module))


if _log_graph not in _dynamo.graph_observers:
    _dynamo.graph_observers.append(_log_graph)
