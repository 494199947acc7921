"""Stand-in for ``habana_frameworks.torch.utils.debug.dynamo_utils``: ``FxGraphAnalyzer``,
which counts the ops of every graph ``hpu_backend`` compiles while it is entered.

Per compiled graph (a forward, a backward or an inference graph) it keeps a dictionary from
each op (``torch.ops.aten.add.Tensor``) to an ``OpCount``: ``graph_count`` for the times it
runs inside a compiled device graph, ``eager_count`` for the times the bridge left it to run
eagerly outside one. Which ops leave is ``compile_backend.shared_layer``'s answer (the
bridge's own fallback rules; an op its graph compiler has no kernel for is not modelled).
The emulator runs each graph's device ops as one partition, so a graph with ops on ``hpu``
counts one; the bridge's partitioner may split one graph into several. Only ops whose
output is on ``hpu`` count, unless ``capture_non_hpu_output``.
"""

import atexit
import itertools
from collections import defaultdict
from typing import Any, ClassVar

import torch
from habana_frameworks.torch.dynamo.compile_backend import shared_layer
from habana_frameworks.torch.dynamo.debug_utils.logger import get_compile_backend_logger

from hpu_emulator import dynamo as _dynamo

logger = get_compile_backend_logger()


def _output_device(node: torch.fx.Node) -> torch.device | None:
    """Where the node's (first tensor) output lives, from the fake value AOT autograd
    traced it with; a number read from a tensor (``.item()``) is the host's."""
    value = node.meta.get("val")
    if isinstance(value, (list, tuple)):
        value = next((v for v in value if isinstance(v, torch.Tensor)), None)
    if isinstance(value, torch.Tensor):
        return value.device
    if isinstance(value, (bool, int, float, torch.SymInt, torch.SymFloat, torch.SymBool)):
        return torch.device("cpu")
    return None


class FxGraphAnalyzer:
    class OpCount:
        def __init__(self) -> None:
            self.graph_count = 0
            self.eager_count = 0

        def __str__(self) -> str:
            return f"{{graph_count = {self.graph_count}, eager_count = {self.eager_count}}}"

        def __repr__(self) -> str:
            return str(self)

    id_iter = itertools.count()
    registered_contexts: ClassVar[dict[int, "FxGraphAnalyzer"]] = {}

    def __init__(self, reset_dynamo: bool = False, capture_non_hpu_output: bool = False) -> None:
        self.capture_non_hpu_output = capture_non_hpu_output
        self.reset_dynamo = reset_dynamo
        self.id = next(FxGraphAnalyzer.id_iter)
        self.graphs: list[dict[str, FxGraphAnalyzer.OpCount]] = []
        self.partition_num = 0
        atexit.register(self._at_exit_callback)

    def __del__(self, _unregister: Any = atexit.unregister) -> None:
        # bound at definition: at interpreter exit the module's globals may be gone
        _unregister(self._at_exit_callback)

    def __enter__(self) -> "FxGraphAnalyzer":
        FxGraphAnalyzer.registered_contexts[self.id] = self
        if self.reset_dynamo:
            torch._dynamo.reset()
        return self

    def __exit__(self, *exc: object) -> None:
        FxGraphAnalyzer.registered_contexts.pop(self.id)

    def _at_exit_callback(self) -> None:
        """As the bridge: ops that ran eagerly are reported at exit (never, here)."""
        eager = [
            f"{op} {count}" for graph in self.graphs for op, count in graph.items()
            if count.eager_count
        ]
        if eager:
            logger.critical("ops in graph with eager fallbacks:\n" + "\n".join(eager) + "\n")

    def count_ops(self, nodes: Any, ctx: Any = None, in_submodule: bool = True,
                  ops_in_graph: dict[str, "FxGraphAnalyzer.OpCount"] | None = None) -> None:
        """Count the ops among ``nodes`` (one compiled graph's) into a new summary."""
        ops: dict[str, FxGraphAnalyzer.OpCount] = (
            defaultdict(FxGraphAnalyzer.OpCount) if ops_in_graph is None else ops_in_graph
        )
        counted = False
        for node in nodes:
            if node.op not in ("call_function", "call_method"):
                continue
            device = _output_device(node)
            if device is None or (device.type != "hpu" and not self.capture_non_hpu_output):
                continue
            count = ops[node._pretty_print_target(node.target)]
            # the device graph holds the ops on hpu the shared layer keeps; a host result
            # (.item()) and a fallback run outside it
            if (in_submodule and device.type == "hpu"
                    and not node.meta.get(shared_layer.META_KEY, False)):
                count.graph_count += 1
                counted = True
            else:
                count.eager_count += 1
        if counted:
            self.partition_num += 1
        if ops_in_graph is None:
            self.graphs.append(dict(ops))

    def get_ops_summary(self) -> list[dict[str, "FxGraphAnalyzer.OpCount"]]:
        return self.graphs

    def get_partition_num(self) -> int:
        return self.partition_num


def _observe(graph_module: torch.fx.GraphModule) -> None:
    for context in list(FxGraphAnalyzer.registered_contexts.values()):
        context.count_ops(graph_module.graph.nodes)


if _observe not in _dynamo.graph_observers:
    _dynamo.graph_observers.append(_observe)
