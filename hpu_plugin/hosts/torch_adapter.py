"""torch: ``torch.compile`` and ``init_process_group`` ask the registry; ``torch.hpu.device``
restores nothing its enter did not change; a device mesh on ``hpu`` is checked against the
Gaudi rule of device groups when it is built; a call selecting another device index than the
process's one keeps the Gaudi software's error, with a hint, and a ``DistributedDataParallel``
bound to another index is refused before its first step.

``torch.compile`` is replaced as soon as activation runs (the end of ``torch/__init__``),
so a ``@torch.compile`` decorator in modeling code imported afterwards is covered, whoever
imports it. Transformers >= 4.55 installs a compile wrapper of its own inside its
``is_torch_hpu_available`` (the plugin replaces that check, but a reference taken earlier
still runs it): the wrapper rewrites every backend but ``eager`` to ``hpu_backend`` and then
calls the ``torch.compile`` it found, ours. A hook decides the backend here, so a call that
comes through the wrapper is taken as one whose backend is the hooks' to choose, and
``torch.compile`` is ours again from then on. The ``torch`` module itself is left as it is:
Dynamo before torch 2.13 breaks the graph at every ``import torch`` whose result is not
exactly a module (``IMPORT_NAME`` in ``torch/_dynamo/symbolic_convert.py``).
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import sys
import types
from collections.abc import Callable, Hashable
from typing import Any

from hpu_plugin.gaudi.software import DEVICE_TYPE, GAUDI_DISTRIBUTION
from hpu_plugin.hookspecs import GAUDI_COMPILE_BACKEND
from hpu_plugin.hosts.callers import find_caller
from hpu_plugin.hosts.replacing import host_version, original_of, replace_everywhere
from hpu_plugin.hosts.support import BRIDGE_DEVICE_EXIT_FAULT_SINCE, release_key
from hpu_plugin.patching import Patches, is_ours, ours, record_out
from hpu_plugin.registry import Registry
from hpu_plugin.reporting import Once, say_once

log = logging.getLogger("hpu_plugin")


def _describe(backend: object) -> str:
    if backend is None:
        return "the default ('inductor')"
    if isinstance(backend, str):
        return repr(backend)
    return getattr(backend, "__name__", repr(backend))


#: ``torch.compile`` calls made by libraries while they were imported (``file:line``), whose
#: backend was replaced without a warning; ``hpu-plugin info`` counts them.
import_time_decorations: list[str] = []


def _say_replaced(requested: object, chosen: object, warned: Once,
                  graph_by_graph: bool) -> None:
    """Warn once per requested backend, naming the caller's file and line; a library's own
    decoration at import time is logged at debug (the user did not write it)."""
    caller = find_caller(3)
    where = caller.where if caller is not None else "an unknown caller"
    if caller is not None and caller.import_time_library:
        import_time_decorations.append(where)
        log.debug(
            "hpu_plugin: torch.compile at %s (a library, while it is imported): backend %s "
            "replaced by %s", where, _describe(requested), _describe(chosen),
        )
        return
    key = requested if isinstance(requested, str) or requested is None else id(requested)
    kept = (f" for graphs on hpu (graphs whose tensors are all elsewhere keep "
            f"{_describe(requested)})" if graph_by_graph else "")
    warned.say(
        key, logging.WARNING,
        "hpu_plugin: torch.compile backend %s at %s does not run on Gaudi (hpu); using %s%s. "
        "Pass backend=%r to silence this warning, or set HPU_PLUGIN_DISABLE=compile to keep "
        "the backend you named everywhere.",
        _describe(requested), where, _describe(chosen), kept, chosen,
    )


def make_compile(registry: Registry, original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.compile`` with the backend chosen by ``registry.compile_backend``."""
    warned = Once()  # requested backends warned about by this wrapper
    backends: dict[tuple[Any, ...], Callable[..., Any]] = {}

    @functools.wraps(original)
    def compile(*args: Any, **kwargs: Any) -> Any:
        if _called_by_transformers_wrapper(sys._getframe(1)):
            _take_back(compile)
            if kwargs.get("backend") == "hpu_backend":  # the wrapper's, whatever was asked
                del kwargs["backend"]
        if not args and kwargs.get("model") is None:
            kwargs.pop("model", None)

            def decorate(model: Callable[..., Any]) -> Any:
                return compile(model, **kwargs)

            return decorate
        requested = kwargs.get("backend")
        chosen = registry.compile_backend(requested)
        if chosen is None or chosen is requested or chosen == requested:
            return original(*args, **kwargs)
        # Gaudi's backend where Gaudi cannot run the one asked for: chosen graph by graph;
        # a plugin's own choice applies to every graph
        graph_by_graph = chosen == GAUDI_COMPILE_BACKEND and isinstance(requested, Hashable)
        _say_replaced(requested, chosen, warned, graph_by_graph)
        if not graph_by_graph:
            kwargs["backend"] = chosen
            return original(*args, **kwargs)
        # one backend object per choice: Dynamo recompiles code it sees with another
        key = (requested, kwargs.get("dynamic"), kwargs.get("name"))
        if key not in backends:
            backends[key] = per_graph(requested, chosen, *key[1:])
        kwargs["backend"] = backends[key]
        return original(*args, **kwargs)

    return ours(compile)


def _default_backend() -> Any:
    """What ``torch.compile`` uses for no backend (``torch.compiler.set_default_backend``
    where torch has it)."""
    try:
        from torch._dynamo.backends.registry import get_default_backend
    except ImportError:
        return "inductor"
    return get_default_backend()


def per_graph(requested: Any, chosen: Any, dynamic: bool | None,
              name: str | None) -> Callable[..., Any]:
    """A backend that compiles each graph with ``chosen`` where it runs on Gaudi, and with
    what the caller asked for where all its tensors are elsewhere: a model the user keeps on
    the CPU (``use_cpu=True``, ``Accelerator(cpu=True)``) is compiled as they chose. torch
    hands it the call's ``mode`` and ``options`` (after taking out its own), as any backend;
    asked once per graph Dynamo captures, never per call."""
    import torch

    def backend(graph: Any, inputs: list[Any], mode: str | None = None,
                options: dict[str, Any] | None = None) -> Any:
        tensors = [*inputs, *graph.parameters(), *graph.buffers()]
        devices = {t.device.type for t in tensors if isinstance(t, torch.Tensor)}
        use = chosen if not devices or DEVICE_TYPE in devices else (
            _default_backend() if requested is None else requested)
        if use == "inductor":
            named = () if name is None else (name,)  # torch 2.13 names the compiled artefacts
            compiler: Any = torch._TorchCompileInductorWrapper(mode, options, dynamic, *named)
        else:
            compiler = torch._TorchCompileWrapper(use, mode, options, dynamic)
        return compiler(graph, inputs)

    backend.__name__ = chosen if isinstance(chosen, str) else getattr(
        chosen, "__name__", "backend")
    return backend


def _called_by_transformers_wrapper(frame: types.FrameType) -> bool:
    return (
        frame.f_code.co_name == "hpu_backend_compile"
        and frame.f_globals.get("__name__") == "transformers.utils.import_utils"
    )


def _take_back(compile: Callable[..., Any]) -> None:
    """``torch.compile`` is ours again (undo still restores torch's own)."""
    import torch

    if torch.compile is not compile:
        torch.compile = compile
        say_once(
            "transformers-compile-wrapper", logging.INFO,
            "hpu_plugin: Transformers' own HPU torch.compile wrapper was installed; "
            "torch.compile is the plugin's again and the hpu_compile_backend hooks choose "
            "the backend.",
        )


def install_compile(registry: Registry, patches: Patches) -> None:
    import torch

    original = original_of(torch, "compile", "torch", "torch.compile", "torch.compile")
    if original is None:
        return
    patches.set(torch, "compile", make_compile(registry, original))


def make_init_process_group(registry: Registry, original: Callable[..., Any]) -> Callable[..., Any]:
    """``init_process_group`` whose missing backend comes from ``registry.ddp_backend``.

    A backend the caller named is kept, but still shown to the hooks first so that one
    that cannot work on Gaudi is refused before any process waits on a collective. An
    ``hccl`` group is then checked across ranks (:mod:`hpu_plugin.hosts.preflight_store`).
    """

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        requested = args[0] if args else kwargs.get("backend")
        chosen = registry.ddp_backend(requested)
        if requested is None and chosen is not None:
            if args:
                args = (chosen, *args[1:])
            else:
                kwargs["backend"] = chosen
        if (chosen or requested) == "hccl":
            from hpu_plugin.hosts.preflight_store import init_with_preflight

            return init_with_preflight(registry, original, args, kwargs)
        return original(*args, **kwargs)

    return ours(init_process_group)


def install_distributed(registry: Registry, patches: Patches) -> None:
    import torch.distributed as dist

    if not dist.is_available():
        return
    from torch.distributed import distributed_c10d

    original = original_of(
        distributed_c10d, "init_process_group", "torch", "init_process_group",
        "torch.distributed.init_process_group",
    )
    if original is None:
        return
    replace_everywhere(patches, original, make_init_process_group(registry, original),
                       alias_scope="torch.distributed")
    # A layer of the Gaudi software may have wrapped ``torch.distributed.init_process_group``
    # before us (the GPU Migration Toolkit maps ``nccl`` to ``hccl`` there, and calls the
    # function it saved, not ours): wrap that one too, so the hooks and the pre-flight check
    # still come first, and the toolkit's mapping runs inside them.
    outer = getattr(dist, "init_process_group", None)
    if outer is not None and outer is not original and not is_ours(outer):
        patches.set(dist, "init_process_group", make_init_process_group(registry, outer))


# -- torch.hpu.device --------------------------------------------------------------------
#
# ``torch.utils.checkpoint`` (gradient checkpointing, which TRL turns on by default, and
# Transformers' ``gradient_checkpointing_enable``) saves and restores the RNG state of each
# device inside ``torch.hpu.device(index)``. In the Gaudi bridge's
# ``habana_frameworks/torch/hpu/__init__.py`` (``device`` and ``set_device``), ``idx`` is the
# process's module id from ``HLS_MODULE_ID``, -1 when unset. ``__enter__`` returns early when
# ``idx == -1``, but ``__exit__`` calls ``set_device(self.idx)`` whenever ``prev_idx`` (0 once
# Accelerate or the user called ``torch.hpu.set_device(0)``) differs from it: ``set_device(-1)``.
# With fewer than 8 modules visible and neither ``HABANA_VISIBLE_MODULES`` nor
# ``HLS_MODULE_ID`` set (a pod, or a machine with 1 to 7 Gaudis) that asserts "the only
# supported device idx is 0"; on a whole server it writes the last module's id into
# ``HLS_MODULE_ID``. The adapted exit restores nothing when its enter selected nothing (as
# CUDA's does when its enter replaced no device); when the enter did select a device, the
# bridge's own exit runs unchanged. Setting ``HLS_MODULE_ID`` instead would reach every child
# process.
#
# Which bridges get the adapter is decided by release (support.BRIDGE_DEVICE_EXIT_FAULT_SINCE):
# the release read has the fault, and every later one gets the adapter too until a release is
# read without it. The adapted exit skips only exits whose enter selected no device, which a
# bridge without the fault has nothing to restore for either.

DEVICE_CONTEXT = "torch.hpu.device exit"


def bridge_has_device_exit_fault(version: str) -> bool | None:
    """Whether Gaudi bridge ``version`` is one the exit adapter is for; None when the
    version cannot be read."""
    key, since = release_key(version), release_key(BRIDGE_DEVICE_EXIT_FAULT_SINCE)
    if key is None or since is None:
        return None
    return key[0] >= since[0]  # a pre-release of the first faulty release counts as it


def make_device_exit(original: Callable[..., Any]) -> Callable[..., Any]:
    """The bridge's exit, skipped when the enter selected no device (its own rule: it
    selects one when ``idx`` is a module id other than ``prev_idx``). A context without
    those attributes is not the bridge's kind: its own exit runs."""

    @functools.wraps(original)
    def __exit__(self: Any, *exc: Any) -> Any:
        idx, prev_idx = getattr(self, "idx", None), getattr(self, "prev_idx", None)
        if idx is not None and (idx == -1 or idx == prev_idx):
            return False
        return original(self, *exc)

    return ours(__exit__)


def install_device_context(
    patches: Patches, hpu: types.ModuleType | None = None, bridge_version: str | None = None
) -> None:
    """Adapt ``torch.hpu.device`` on the bridge releases with the fault; say why not otherwise.

    ``bridge_version`` is the installed ``habana-torch-plugin``'s unless given (tests).
    """
    if hpu is None:
        import torch

        hpu = getattr(torch, DEVICE_TYPE, None)
        if hpu is None:  # no Gaudi software loaded: there is no context manager to adapt
            return
    version = bridge_version or host_version(GAUDI_DISTRIBUTION)
    faulty = bridge_has_device_exit_fault(version)
    if not faulty:
        why = "is not a release that can be read" if faulty is None else (
            f"is older than {BRIDGE_DEVICE_EXIT_FAULT_SINCE}, the first release read with the "
            "fault"
        )
        record_out(GAUDI_DISTRIBUTION, DEVICE_CONTEXT, f"{GAUDI_DISTRIBUTION} {version} {why}")
        log.info("hpu_plugin: torch.hpu.device is left as it is: %s %s %s",
                 GAUDI_DISTRIBUTION, version, why)
        return
    device_class = getattr(hpu, "device", None)
    found = isinstance(device_class, type)
    original = original_of(
        device_class if found else None, "__exit__", GAUDI_DISTRIBUTION, DEVICE_CONTEXT,
        "torch.hpu.device class with __enter__ and __exit__", own=True,
    )
    if original is None:
        return
    patches.set(device_class, "__exit__", make_device_exit(original))


# -- one device per process ---------------------------------------------------------------
#
# A Gaudi process drives one device, always ``hpu:0`` (the bridge's ``HPUGuardImpl::
# exchangeDevice`` and its allocator check ``habana active device: <i> != 0``). A host's own
# binding to device ``LOCAL_RANK`` is adapted where the host makes it (Transformers'
# ``_bind_local_device``); torch's ``DeviceMesh`` binds through ``torch.hpu.set_device``,
# which the Gaudi software maps to the process's module itself. A user's own call to another
# index is not changed: the Gaudi software's error stays, and the plugin adds what to do.

ACTIVE_DEVICE = "habana active device: "
ONE_DEVICE_HINT = (
    "hpu_plugin: a Gaudi process drives one device, always hpu:0; which module it is comes "
    "from HABANA_VISIBLE_MODULES and the launcher's LOCAL_RANK (one process per device). "
    "Use the device 'hpu' (or index 0) on every rank, or torch.hpu.set_device(local_rank), "
    "which maps a local rank to the process's own module."
)


def add_one_device_hint(exc: BaseException) -> None:
    """Add the hint to the Gaudi software's one-device error, once; its text is kept."""
    if ACTIVE_DEVICE not in str(exc) or ONE_DEVICE_HINT in str(exc):
        return
    notes = getattr(exc, "__notes__", ())
    if ONE_DEVICE_HINT in notes:
        return
    if hasattr(exc, "add_note"):  # Python 3.11+: shown under the error, which is unchanged
        exc.add_note(ONE_DEVICE_HINT)
    elif exc.args and isinstance(exc.args[0], str):
        exc.args = (f"{exc.args[0]}\n{ONE_DEVICE_HINT}", *exc.args[1:])


def with_one_device_hint(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` unchanged, but its one-device error carries the hint."""

    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        except RuntimeError as exc:
            add_one_device_hint(exc)
            raise

    return ours(call)


def install_device_index_hint(patches: Patches) -> None:
    """``torch.accelerator.set_device_index`` (and its deprecated alias), the
    ``torch.accelerator.device_index`` context and ``nn.Module.to``: the calls by which code
    written for other accelerators selects device ``LOCAL_RANK`` or moves its model there
    (``model.to(f"hpu:{local_rank}")``). None is a per-op path: a tensor's own ``.to`` keeps
    the bare error."""
    import torch

    original = original_of(torch.nn.Module, "to", "torch", "device index hint",
                           "torch.nn.Module.to", own=True)
    if original is not None:
        patches.set(torch.nn.Module, "to", with_one_device_hint(original))

    accelerator = getattr(torch, "accelerator", None)
    for name in ("set_device_index", "set_device_idx"):
        if name == "set_device_idx" and not hasattr(accelerator, name):
            continue  # torch's deprecated alias: nothing to adapt once torch drops it
        original = original_of(accelerator, name, "torch", "device index hint",
                               f"torch.accelerator.{name}")
        if original is not None:
            patches.set(accelerator, name, with_one_device_hint(original))
    context = getattr(accelerator, "device_index", None)
    original = original_of(context if isinstance(context, type) else None, "__enter__", "torch",
                           "device index hint", "torch.accelerator.device_index", own=True)
    if original is not None:
        patches.set(context, "__enter__", with_one_device_hint(original))


DDP_CHECK = "DistributedDataParallel device check"


def _bare_hpu(device: object) -> bool:
    """``torch.device("hpu")`` or ``"hpu"``: the current Gaudi, named without its index."""
    return device == DEVICE_TYPE or (getattr(device, "type", None) == DEVICE_TYPE
                                     and getattr(device, "index", 0) is None)


def make_ddp_init(original: Callable[..., Any]) -> Callable[..., Any]:
    """``DistributedDataParallel.__init__`` for a module on ``hpu``, on two counts.

    A device named without its index (``device_ids=[torch.device("hpu")]``, as code converted
    from ``torch.device("cuda")`` and Ray Train's first ``prepare_model`` pass it) means the
    current device; torch finds the current index of
    CUDA, XPU, MPS, MTIA and PrivateUse1 devices only, and for HPU hands ``[None]`` on, which
    DDP's logger refuses with a ``TypeError``. The current index is filled in.

    A module bound to another index than 0 (``device_ids=[local_rank]``, as CUDA recipes write
    it) is refused once DDP has read its arguments: DDP would move every input there at the
    first forward and fail on each rank but the first with the device guard's bare error.
    What DDP resolved is checked, not the call, so a wrapper that drops the ids (the GPU
    Migration Toolkit's) is seen."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError:  # DDP reports its own arguments
            bound = None
        ids = None if bound is None else bound.arguments.get("device_ids")
        if isinstance(ids, list | tuple) and ids and all(map(_bare_hpu, ids)):
            import torch

            current = torch.device(DEVICE_TYPE, torch.hpu.current_device())
            bound.arguments["device_ids"] = [current]  # type: ignore[union-attr]
            if _bare_hpu(bound.arguments.get("output_device")):  # type: ignore[union-attr]
                bound.arguments["output_device"] = current  # type: ignore[union-attr]
            args, kwargs = bound.args[1:], bound.kwargs  # type: ignore[union-attr]
        original(self, *args, **kwargs)
        ids = getattr(self, "device_ids", None)
        if getattr(self, "device_type", None) == DEVICE_TYPE and ids and ids[0] not in (None, 0):
            raise ValueError(
                f"DistributedDataParallel(device_ids={ids!r}) binds the module to hpu:{ids[0]}:"
                " a Gaudi process drives one device, always hpu:0 (the launcher's LOCAL_RANK "
                "chooses which module it is). Fix: leave device_ids out "
                "(DistributedDataParallel(model)), or pass device_ids=[0] on every rank.")

    return ours(__init__)


def install_ddp_device_check(patches: Patches) -> None:
    try:
        from torch.nn.parallel import DistributedDataParallel
    except ImportError:  # a torch built without distributed
        record_out("torch", DDP_CHECK, "torch.nn.parallel.DistributedDataParallel is missing")
        return
    original = original_of(DistributedDataParallel, "__init__", "torch", DDP_CHECK,
                           "torch.nn.parallel.DistributedDataParallel.__init__", own=True)
    if original is not None:
        patches.set(DistributedDataParallel, "__init__", make_ddp_init(original))


MESH = "device mesh check"


def make_init_device_mesh(original: Callable[..., Any]) -> Callable[..., Any]:
    """``init_device_mesh`` that checks an ``hpu`` mesh's devices on this node against the
    Gaudi rule of device groups (:func:`hpu_plugin.gaudi.selection.check_mesh`) before the
    mesh starts a process group or any collective. Arguments it cannot read go to torch
    unchecked, which reports them itself."""
    from hpu_plugin.gaudi import selection
    from hpu_plugin.machine import cached_index_module_map

    signature = inspect.signature(original)

    @functools.wraps(original)
    def init_device_mesh(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs).arguments
            device_type, shape = bound.get("device_type"), tuple(bound.get("mesh_shape") or ())
            names = bound.get("mesh_dim_names")
            readable = device_type == DEVICE_TYPE and all(isinstance(n, int) for n in shape)
        except TypeError:
            readable = False
        if readable and selection.job_from_environ(os.environ) is not None:
            for warning in selection.check_mesh(os.environ, shape, names,
                                                cached_index_module_map()):
                say_once(("mesh", warning), logging.WARNING, "hpu_plugin: %s", warning,
                         logger=log)
        return original(*args, **kwargs)

    return ours(init_device_mesh)


def install_device_mesh(patches: Patches) -> None:
    import torch.distributed as dist

    if not dist.is_available():
        return
    try:
        from torch.distributed import device_mesh
    except ImportError:  # a torch built without the distributed tensor stack
        record_out("torch", MESH, "torch.distributed.device_mesh cannot be imported")
        return
    original = original_of(device_mesh, "init_device_mesh", "torch", MESH,
                           "torch.distributed.device_mesh.init_device_mesh")
    if original is None:
        return
    replace_everywhere(patches, original, make_init_device_mesh(original),
                               alias_scope="torch.distributed")


def install(registry: Registry, patches: Patches) -> None:
    install_compile(registry, patches)
    install_distributed(registry, patches)
    install_device_context(patches)
    install_device_index_hint(patches)
    install_ddp_device_check(patches)
    install_device_mesh(patches)
