"""``hpu_backend`` for ``torch.compile``, registered when dynamo's registry is first imported.

Importing torch._dynamo inside ``import torch`` would slow every program down and risks
import cycles, so a one-shot meta-path hook adds the backend as the registry module loads
(the real stack defers its compilers the same way). On the emulator the backend is
``aot_eager``: Inductor has no HPU device, on hardware as here.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

REGISTRY = "torch._dynamo.backends.registry"


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
    from hpu_plugin.emulation.recipes import counted

    return aot_autograd(  # aot_eager's own recipe, with counting compilers
        fw_compiler=counted(boxed_nop, "fwd"),
        bw_compiler=counted(boxed_nop, "bwd"),
        partition_fn=min_cut_rematerialization_partition,
        keep_inference_input_mutations=True,
    )(graph_module, example_inputs)


def _register(registry: ModuleType) -> None:
    if "hpu_backend" not in registry._BACKENDS:
        registry.register_backend(name="hpu_backend")(hpu_backend)


class _RegistryHook(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != REGISTRY:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                break
        else:
            return None
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            _uninstall()
            _register(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


_hook = _RegistryHook()


def _uninstall() -> None:
    if _hook in sys.meta_path:
        sys.meta_path.remove(_hook)


def register_lazily() -> None:
    registry = sys.modules.get(REGISTRY)
    if registry is not None:
        _register(registry)
    elif _hook not in sys.meta_path:
        sys.meta_path.insert(0, _hook)
