"""``hpu_backend`` for ``torch.compile``, registered when dynamo's registry is first imported.

Importing torch._dynamo inside ``import torch`` would slow every program down and risks
import cycles, so a post-import hook (``hpu_plugin.importhook``, the one the host adapters
use) adds the backend as the registry module loads (the real stack defers its compilers the
same way). On the emulator the backend is AOT autograd with the bridge's partitioner and
eager kernels: Inductor has no HPU device, on hardware as here.
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
        from torch._functorch.partitioners import default_partition
    except ImportError:  # another torch layout: run uncounted rather than not at all
        return lookup_backend("aot_eager")(graph_module, example_inputs)
    from hpu_emulator.recipes import counted

    # The bridge's partitioner is torch's default one (``default_partition``: it saves what
    # the backward reads, and recomputes only what activation checkpointing tagged).
    return aot_autograd(
        fw_compiler=_observed(counted(boxed_nop, "fwd")),
        bw_compiler=_observed(counted(boxed_nop, "bwd")),
        partition_fn=default_partition,
        keep_inference_input_mutations=True,
    )(graph_module, example_inputs)


def register(registry: ModuleType) -> None:
    """Add ``hpu_backend`` to dynamo's backend ``registry`` unless it has one."""
    if "hpu_backend" not in registry._BACKENDS:
        registry.register_backend(name="hpu_backend")(hpu_backend)


#: The ``torch.hpu`` functions dynamo records as calls in the graph or folds to constants,
#: as the bridge's ``habana_frameworks.torch.dynamo.trace_rules`` lists them.
IN_GRAPH = ("is_available", "current_device", "device_count")
CONSTANT_FOLDED = ("is_available", "current_device")


def register_device_interface(device_interface: ModuleType) -> None:
    """Give dynamo a device interface for ``hpu`` (and ``hpu:0``, the one index), as importing
    the bridge's ``habana_frameworks.torch.dynamo`` does: through it dynamo traces
    ``torch.hpu.Stream``, ``Event`` and the ``with torch.hpu.stream(s):`` context."""
    import torch

    hpu = torch.hpu

    class HpuInterface(device_interface.DeviceInterface):  # type: ignore[misc, name-defined]
        device = hpu.device
        Event = hpu.Event
        Stream = hpu.Stream

        class Worker:
            @staticmethod
            def set_device(device: int) -> None:
                """One device a process: nothing to remember."""

            @staticmethod
            def current_device() -> int:
                return int(hpu.current_device())

            @staticmethod
            def get_device_properties(device: Any = None) -> Any:
                return hpu.get_device_properties(device)

        current_device = staticmethod(hpu.current_device)
        set_device = staticmethod(hpu.set_device)
        device_count = staticmethod(hpu.device_count)
        stream = staticmethod(hpu.stream)
        current_stream = staticmethod(hpu.current_stream)
        set_stream = staticmethod(hpu.set_stream)
        _set_stream_by_id = staticmethod(hpu._set_stream_by_id)
        synchronize = staticmethod(hpu.synchronize)
        get_device_properties = staticmethod(hpu.get_device_properties)
        memory_allocated = staticmethod(hpu.memory_allocated)

        @staticmethod
        def get_raw_stream(device_index: int = 0) -> int:
            return int(hpu.current_stream().stream_id)

        @staticmethod
        def is_available() -> bool:
            return bool(hpu.is_available())

        @staticmethod
        def get_compute_capability(device: Any = None) -> Any:
            return hpu.get_device_capability(device)

    for name in ("hpu", "hpu:0"):
        device_interface.register_interface_for_device(name, HpuInterface)


def register_trace_rules(trace_rules: ModuleType) -> None:
    """List ``IN_GRAPH`` with dynamo's rules for torch's own functions, by the bridge's names
    (dynamo's variables, which the rules module imports first, are loaded by now)."""
    import torch
    from torch._dynamo.variables import torch as torch_variables

    rule = trace_rules.TorchInGraphFunctionVariable
    in_graph = IN_GRAPH if _streams_traced_symbolically() else (*IN_GRAPH, "current_stream")
    names = [f"habana_frameworks.torch.hpu.{n}" for n in in_graph if hasattr(torch.hpu, n)]
    trace_rules.torch_name_rule_map.append(dict.fromkeys(names, rule))
    trace_rules.get_torch_obj_rule_map.cache_clear()
    for n in CONSTANT_FOLDED:
        torch_variables.constant_fold_functions[getattr(torch.hpu, n)] = None


def _streams_traced_symbolically() -> bool:
    """Whether this dynamo tracks the current stream itself (torch 2.10 and later): there
    ``torch.hpu.current_stream`` is traced into and hands over to ``torch.accelerator``'s,
    which dynamo models; before, dynamo turns a call of a device interface's
    ``current_stream`` in the graph into a stream, as the bridge's rules list it."""
    try:
        from torch._dynamo.variables import streams
    except ImportError:
        return False
    return hasattr(streams, "SymbolicStreamState")


def register_lazily() -> None:
    """Add ``hpu_backend``, the device interface and the trace rules now if dynamo has loaded
    the module each goes in, else once it has."""
    from hpu_plugin import importhook

    importhook.when_imported(REGISTRY, register, owner="emulator")
    importhook.when_imported("torch._dynamo.device_interface", register_device_interface,
                             owner="emulator")
    importhook.when_imported("torch._dynamo.trace_rules", register_trace_rules,
                             owner="emulator")
