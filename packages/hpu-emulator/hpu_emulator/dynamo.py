"""``hpu_backend`` for ``torch.compile``, registered when dynamo's registry is first imported.

Importing torch._dynamo inside ``import torch`` would slow every program down and risks
import cycles, so a post-import hook (``hpu_plugin.importhook``, the one the host adapters
use) adds the backend as the registry module loads (the real stack defers its compilers the
same way). On the emulator the backend is ``aot_eager``: Inductor has no HPU device, on
hardware as here.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

REGISTRY = "torch._dynamo.backends.registry"

#: Called with each FX graph ``hpu_backend`` compiles (forward, backward or inference) when
#: it is compiled: the stand-in ``utils.debug.dynamo_utils.FxGraphAnalyzer`` counts its ops
#: here, where the bridge counts them in a pass of its compiler.
graph_observers: list[Callable[[Any], None]] = []


def _observed(compiler: Callable[..., Any]) -> Callable[..., Any]:
    def compile_graph(graph_module: Any, example_inputs: Any) -> Any:
        for observe in list(graph_observers):
            observe(graph_module)
        return compiler(graph_module, example_inputs)

    return compile_graph


def hpu_backend(graph_module: Any, example_inputs: Any, **kwargs: Any) -> Any:
    """Compile for HPU: AOT autograd with eager kernels (``options=`` is accepted, unused).

    The forward and backward graphs go through the recipe-cache model (``recipes``), so that
    ``metric_global("graph_compilation")`` counts what hardware would compile.
    """
    from torch._dynamo.backends.registry import lookup_backend

    try:
        from torch._dynamo.backends.common import aot_autograd
        from torch._dynamo.backends.debugging import boxed_nop
        from torch._functorch.partitioners import min_cut_rematerialization_partition
    except ImportError:  # another torch layout: run uncounted rather than not at all
        return lookup_backend("aot_eager")(graph_module, example_inputs)
    from hpu_emulator.recipes import counted

    return aot_autograd(  # aot_eager's own recipe, with counting compilers
        fw_compiler=_observed(counted(boxed_nop, "fwd")),
        bw_compiler=_observed(counted(boxed_nop, "bwd")),
        partition_fn=min_cut_rematerialization_partition,
        keep_inference_input_mutations=True,
    )(graph_module, example_inputs)


def register(registry: ModuleType) -> None:
    """Add ``hpu_backend`` to dynamo's backend ``registry`` unless it has one."""
    if "hpu_backend" not in registry._BACKENDS:
        registry.register_backend(name="hpu_backend")(hpu_backend)


def register_lazily() -> None:
    """Add ``hpu_backend`` now if dynamo's registry is loaded, else once it has loaded."""
    from hpu_plugin import importhook

    importhook.when_imported(REGISTRY, register, owner="emulator")
