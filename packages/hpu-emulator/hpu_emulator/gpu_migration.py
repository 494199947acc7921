"""The GPU Migration Toolkit on the emulator: CUDA-written code runs on the emulated Gaudi.

Loaded only by ``import habana_frameworks.torch.gpu_migration`` (the stand-in), which the
stand-in ``habana_frameworks.torch`` imports when ``PT_HPU_GPU_MIGRATION`` is on, as the real
package does: without it nothing here is imported and ``torch.cuda`` stays PyTorch's own.

What it maps follows Intel's table (Gaudi docs, "GPU Migration Toolkit APIs"), class by class:

- ``hpu_match``: ``torch.cuda.*`` calls that have a ``torch.hpu`` twin call it, with ``cuda``
  device arguments mapped to ``hpu``; device arguments of the factory functions, of
  ``Tensor.to`` and ``Tensor.cuda``; ``init_process_group``/``new_group`` with ``nccl`` (or no
  backend) run HCCL, and ``get_backend()`` answers ``nccl`` for it; ``barrier`` drops
  ``device_ids``; ``DistributedDataParallel`` drops ``device_ids`` and ``output_device``;
  ``autocast``/``GradScaler`` for ``cuda`` run for ``hpu``; ``torch.load``'s
  ``map_location``; ``with torch.device("cuda")``; ``torch.compile``'s default
  ``inductor`` backend becomes ``hpu_backend``.
- ``hpu_modified``: ``device_count`` (the toolkit asks pyhlml; here the emulated server),
  ``current_device`` (from ``HLS_MODULE_ID`` in ``HABANA_VISIBLE_MODULES``, else
  ``LOCAL_RANK``), ``get_device_capability`` = (9, 0), ``get_device_properties`` (a CUDA-shaped
  record), ``empty_cache``/``ipc_collect`` do nothing, ``pin_memory=True`` is dropped.
- ``hpu_mismatch``: ``torch.nn.DataParallel``, CUDA graphs: ``NotImplementedError`` naming
  the replacement.
- ``pynvml``: mapped to the emulated devices (``hpu_emulator.nvml``), as the toolkit
  maps it to ``pyhlml``.

Every mapped call pays one Python frame (``Tensor.to``, the factories): the cost the real
toolkit has too, and only while it is on. ``bench/gpu_migration_overhead.py`` measures it.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from typing import Any

import torch

from hpu_plugin import settings
from hpu_plugin.gaudi import migration, visibility
from hpu_plugin.patching import this_process

log = logging.getLogger(migration.MODULE)

#: Every change the toolkit made, listed by ``hpu-plugin info --json`` as the emulator's are.
patches = this_process.gpu_migration

#: Factory functions whose ``device=`` argument is mapped (the toolkit's list).
FACTORIES = (
    "empty", "empty_like", "randn", "rand_like", "rand", "randint", "randint_like",
    "randn_like", "tensor", "zeros", "zeros_like", "arange", "range", "full", "full_like",
    "eye", "empty_strided", "ones", "ones_like", "as_tensor", "randperm",
)
#: ``torch.cuda`` calls with a ``torch.hpu`` twin of the same meaning (``hpu_match``).
MATCHED = (
    "is_available", "is_initialized", "init", "synchronize", "get_device_name",
    "current_stream", "default_stream", "set_stream", "stream", "Stream", "Event",
    "StreamContext", "device", "device_of", "is_bf16_supported", "memory_usage",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "memory_cached", "max_memory_cached", "reset_peak_memory_stats",
    "reset_max_memory_allocated", "reset_accumulated_memory_stats", "memory_stats",
    "memory_summary", "mem_get_info", "manual_seed", "manual_seed_all", "seed", "seed_all",
    "initial_seed", "get_rng_state", "set_rng_state", "get_rng_state_all",
    "set_rng_state_all", "set_device",
)
#: Calls the toolkit refuses (``hpu_mismatch``), with the way out it names.
MISMATCHED = {
    "CUDAGraph": "CUDA graphs do not exist on Gaudi; use HPU graphs "
                 "(habana_frameworks.torch.hpu.wrap_in_hpu_graph) or torch.compile",
    "graph": "CUDA graphs do not exist on Gaudi; use HPU graphs "
             "(habana_frameworks.torch.hpu.wrap_in_hpu_graph) or torch.compile",
    "make_graphed_callables": "CUDA graphs do not exist on Gaudi; use torch.compile",
}
CUDA, HPU = "cuda", "hpu"

_fp16_to_bf16 = False


def to_hpu(device: Any) -> Any:
    """A device argument as the toolkit maps it: ``cuda[:n]`` and a bare index become
    ``hpu[:n]``; anything else is returned as given (the same object, so callers can tell)."""
    kind = device.__class__
    if kind is str:
        if device.startswith(CUDA):
            return HPU + device[len(CUDA):]
        return HPU + ":" + device if device.isdigit() else device
    if kind is torch.device:
        return torch.device(HPU, device.index) if device.type == CUDA else device
    if kind is int:
        return HPU + ":" + str(device)
    return device


def _log_mapping(api: str, what: str) -> None:
    """The toolkit's log (``GPU_MIGRATION_LOG_LEVEL``), one line per mapped API."""
    if log.isEnabledFor(logging.INFO):
        log.info("%s: %s", api, what)


def _factory(original: Callable[..., Any], name: str) -> Callable[..., Any]:
    @functools.wraps(original)
    def factory(*args: Any, **kwargs: Any) -> Any:
        if not kwargs:  # an empty **kwargs costs PyTorch's argument parser microseconds
            return original(*args)
        device = kwargs.get("device")
        if device is not None:
            kwargs["device"] = mapped = to_hpu(device)
            if _fp16_to_bf16 and kwargs.get("dtype") is torch.float16:
                kwargs["dtype"] = torch.bfloat16
            if mapped is not device:
                _log_mapping(f"torch.{name}", f"device {device} -> {mapped}")
        if kwargs.get("pin_memory"):
            kwargs["pin_memory"] = False  # hpu_modified: Gaudi's allocator pins nothing
        return original(*args, **kwargs)

    return factory


def _tensor_methods(tensor: type[torch.Tensor]) -> None:
    original_to = tensor.to

    @functools.wraps(original_to)
    def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if args:
            first = to_hpu(args[0])
            if first is not args[0]:
                args = (first, *args[1:])
        device = kwargs.get("device")
        if device is not None:
            kwargs["device"] = to_hpu(device)
        if _fp16_to_bf16:
            args = tuple(torch.bfloat16 if a is torch.float16 else a for a in args)
            if kwargs.get("dtype") is torch.float16:
                kwargs["dtype"] = torch.bfloat16
        return original_to(self, *args, **kwargs) if kwargs else original_to(self, *args)

    def cuda(self: torch.Tensor, device: Any = None, non_blocking: bool = False,
             memory_format: torch.memory_format = torch.preserve_format) -> torch.Tensor:
        target = HPU if device is None else to_hpu(device)
        return original_to(self, device=target, non_blocking=non_blocking,
                           memory_format=memory_format)

    patches.set(tensor, "to", to)
    patches.set(tensor, "cuda", cuda)
    # hpu_match: an HPU tensor answers is_cuda, as code that branches on it expects
    patches.set(tensor, "is_cuda", property(lambda self: self.device.type == HPU))


def _current_device() -> int:
    """hpu_modified: the index of this process's module among the visible ones, else the
    launcher's local rank: what CUDA code expects after ``set_device(local_rank)``."""
    module, visible = os.environ.get(visibility.MODULE_ID), os.environ.get(visibility.MODULES)
    if module is not None and visible is not None:
        ids = [item.strip() for item in visible.split(",")]
        if module.strip() in ids:
            return ids.index(module.strip())
        raise ValueError(
            f"Cannot find module_id {module} of {visibility.MODULE_ID} in "
            f"{visibility.MODULES}={visible}"
        )
    if "LOCAL_RANK" in os.environ:
        return settings.rank("LOCAL_RANK", os.environ["LOCAL_RANK"])
    return int(torch.hpu.current_device())


class _CudaDeviceProperties:
    """hpu_modified: what ``torch.cuda.get_device_properties`` callers read."""

    def __init__(self, name: str, total_memory: int) -> None:
        self.name = name
        self.major, self.minor = 9, 0
        self.total_memory = total_memory
        self.multi_processor_count = os.cpu_count() or 1

    def __repr__(self) -> str:
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, "
                f"minor={self.minor}, total_memory={self.total_memory // 2**20}MB)")


def _device_properties(device: Any = None) -> _CudaDeviceProperties:
    """As ``torch.cuda.get_device_properties``: an index past the devices is refused as
    CUDA refuses it ("Invalid device id")."""
    if device is not None:
        mapped = to_hpu(device)
        index = torch.device(mapped).index if isinstance(mapped, (str, torch.device)) else None
        if index is not None and not 0 <= index < int(torch.hpu.device_count()):
            raise AssertionError("Invalid device id")
    return _CudaDeviceProperties(torch.hpu.get_device_name(), int(torch.hpu.mem_get_info()[1]))


def _with_device(name: str) -> Callable[..., Any]:
    """A ``torch.cuda`` call mapped to its ``torch.hpu`` twin, device arguments mapped."""
    target = getattr(torch.hpu, name)
    if not callable(target):
        return target
    if isinstance(target, type):
        if name != "device":
            return target
        # torch.cuda.device("cuda:0"): also how torch.load restores a storage saved on CUDA

        class cuda_device(target):  # type: ignore[valid-type, misc]
            def __init__(self, device: Any) -> None:
                super().__init__(device if device.__class__ is int else to_hpu(device))

        cuda_device.__name__ = cuda_device.__qualname__ = name
        return cuda_device

    @functools.wraps(target)
    def call(*args: Any, **kwargs: Any) -> Any:
        # a bare int stays: it is an index to torch.hpu too, and a seed to manual_seed
        args = tuple(a if a.__class__ is int else to_hpu(a) for a in args)
        if "device" in kwargs:
            kwargs["device"] = to_hpu(kwargs["device"])
        return target(*args, **kwargs)

    return call


def _refusal(name: str, fix: str) -> Any:
    """What the toolkit puts in place of an unsupported call: it raises when called. A class
    stays a class (code annotates with ``torch.cuda.CUDAGraph | None``)."""
    message = (f"torch.cuda.{name} is not supported on HPU by the GPU Migration Toolkit "
               f"(hpu_mismatch): {fix}.")

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(message)

    if isinstance(getattr(torch.cuda, name, None), type):
        return type(name, (), {"__init__": refuse, "__module__": "torch.cuda"})
    return refuse


def _cuda_module() -> None:
    cuda = torch.cuda
    for name in MATCHED:
        if hasattr(torch.hpu, name):
            patches.set(cuda, name, _with_device(name))
    modified: dict[str, Any] = {
        "device_count": lambda: int(torch.hpu.device_count()),
        "current_device": _current_device,
        "get_device_capability": lambda device=None: (9, 0),
        "get_device_properties": _device_properties,
        "empty_cache": lambda: None,
        "ipc_collect": lambda: None,
        "cudart": lambda: None,
        "current_blas_handle": lambda: 0,
        "get_arch_list": lambda: [],
    }
    for name, value in modified.items():
        patches.set(cuda, name, value)
    for name, fix in MISMATCHED.items():
        patches.set(cuda, name, _refusal(name, fix))
    for name in ("FloatTensor", "LongTensor", "HalfTensor", "BFloat16Tensor", "IntTensor",
                 "DoubleTensor", "BoolTensor", "ByteTensor", "CharTensor", "ShortTensor"):
        if hasattr(torch.hpu, name):
            patches.set(cuda, name, getattr(torch.hpu, name))


def _dtype(dtype: torch.dtype | None) -> torch.dtype | None:
    """An autocast dtype for HPU: float16 stays unless the FP16-to-BF16 switch is on; none
    is HPU autocast's own default (bfloat16)."""
    return torch.bfloat16 if _fp16_to_bf16 and dtype is torch.float16 else dtype


def _amp() -> None:
    """autocast and GradScaler for ``cuda`` run for ``hpu``."""
    base = torch.amp.autocast_mode.autocast

    class autocast(base):  # type: ignore[misc, valid-type]
        def __init__(self, device_type: str, dtype: torch.dtype | None = None,
                     *args: Any, **kwargs: Any) -> None:
            if device_type == CUDA:
                device_type, dtype = HPU, _dtype(dtype)
            super().__init__(device_type, dtype, *args, **kwargs)

    class cuda_autocast(base):  # type: ignore[misc, valid-type]
        def __init__(self, enabled: bool = True, dtype: torch.dtype | None = None,
                     cache_enabled: bool = True) -> None:
            super().__init__(HPU, dtype=_dtype(dtype), enabled=enabled,
                             cache_enabled=cache_enabled)

    scaler_base = torch.amp.GradScaler

    class GradScaler(scaler_base):  # type: ignore[misc, valid-type]
        def __init__(self, device: str = CUDA, *args: Any, **kwargs: Any) -> None:
            super().__init__(HPU if device == CUDA else device, *args, **kwargs)

    class CudaGradScaler(scaler_base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(HPU, *args, **kwargs)

    for owner in (torch, torch.amp):
        patches.set(owner, "autocast", autocast)
    patches.set(torch.amp, "GradScaler", GradScaler)
    patches.set(torch.cuda.amp, "autocast", cuda_autocast)
    patches.set(torch.cuda.amp, "GradScaler", CudaGradScaler)
    patches.set(torch.cuda, "is_bf16_supported", lambda *a, **k: True)


def _distributed() -> None:
    import torch.distributed as dist

    if not dist.is_available():
        return
    parent_init, parent_backend = dist.init_process_group, dist.get_backend
    parent_barrier, parent_new_group = dist.barrier, dist.new_group

    @functools.wraps(parent_init)
    def init_process_group(backend: str | None = None, *args: Any, **kwargs: Any) -> Any:
        mapped = migration.ddp_backend(backend)
        if mapped is not None:
            _log_mapping("torch.distributed.init_process_group", f"backend {backend} -> {mapped}")
            backend = mapped
        return parent_init(backend, *args, **kwargs)

    @functools.wraps(parent_backend)
    def get_backend(group: Any = None) -> Any:
        backend = parent_backend(group)
        return migration.REPORTED_BACKEND.get(str(backend), backend)

    @functools.wraps(parent_barrier)
    def barrier(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("device_ids", None)  # valid for NCCL only
        return parent_barrier(*args[:2], **kwargs)

    @functools.wraps(parent_new_group)
    def new_group(*args: Any, **kwargs: Any) -> Any:
        backend = kwargs.get("backend")
        if isinstance(backend, str) and backend in migration.DISTRIBUTED:
            kwargs["backend"] = migration.DISTRIBUTED[backend]
        return parent_new_group(*args, **kwargs)

    for name, value in (("init_process_group", init_process_group),
                        ("get_backend", get_backend), ("barrier", barrier),
                        ("new_group", new_group), ("is_nccl_available", lambda: True)):
        patches.set(dist, name, value)
    _ddp()


def _ddp() -> None:
    ddp = torch.nn.parallel.DistributedDataParallel
    parent = ddp.__init__

    @functools.wraps(parent)
    def __init__(self: Any, module: Any, device_ids: Any = None, output_device: Any = None,
                 *args: Any, **kwargs: Any) -> None:
        parent(self, module, None, None, *args, **kwargs)  # hpu_match: ids are CUDA's

    patches.set(ddp, "__init__", __init__)

    class DataParallel(torch.nn.Module):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise NotImplementedError(
                "torch.nn.DataParallel is not supported on HPU by the GPU Migration Toolkit "
                "(hpu_mismatch): use torch.nn.parallel.DistributedDataParallel, one process "
                "per Gaudi (torchrun --nproc_per_node N)."
            )

    patches.set(torch.nn, "DataParallel", DataParallel)


def _compile() -> None:
    original = torch.compile

    @functools.wraps(original)
    def compile(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("backend", "inductor") in migration.COMPILE:
            kwargs["backend"] = migration.COMPILE[kwargs.get("backend", "inductor")]
        return original(*args, **kwargs)

    patches.set(torch, "compile", compile)


def _load() -> None:
    """hpu_match: ``torch.load``'s ``map_location`` of ``cuda`` (or a map to it) is ``hpu``,
    and so is the ``cuda`` a checkpoint saved on a GPU names for its storages."""
    original = torch.load

    @functools.wraps(original)
    def load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
        if isinstance(map_location, dict):
            map_location = {str(to_hpu(k)): str(to_hpu(v)) for k, v in map_location.items()}
        elif map_location is not None and not callable(map_location):
            map_location = to_hpu(map_location)
        return original(f, map_location, *args, **kwargs)

    patches.set(torch, "load", load)
    # a storage saved on CUDA is restored by storage.to("cuda:0") (also storage.cuda() in a
    # map_location function): one function of torch.storage moves storages
    import torch.storage as storage_module

    move = storage_module._to

    @functools.wraps(move)
    def to(self: Any, device: Any, non_blocking: bool = False) -> Any:
        return move(self, to_hpu(device), non_blocking)

    patches.set(storage_module, "_to", to)


def _device_context() -> None:
    """hpu_match: ``with torch.device("cuda"):`` and ``torch.set_default_device("cuda")``
    place on ``hpu`` (both go through PyTorch's ``DeviceContext``)."""
    from torch.utils import _device

    context = _device.DeviceContext
    parent = context.__init__

    @functools.wraps(parent)
    def __init__(self: Any, device: Any) -> None:
        parent(self, to_hpu(device))

    patches.set(context, "__init__", __init__)


def _logging() -> None:
    level = os.environ.get(migration.LOG_LEVEL)
    if level is None or log.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[gpu_migration] %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO if level.strip() in {"1", "2", "3"} else logging.WARNING)


def activate() -> None:
    """Install the mappings; idempotent (the module is imported once, but be safe)."""
    global _fp16_to_bf16
    if patches.made:
        return
    _fp16_to_bf16 = os.environ.get(migration.FP16_TO_BF16) == "1"
    _logging()
    # PyTorch's device context recognises the factories by identity, from a set it caches
    # on first use: fill it with PyTorch's own functions before they are wrapped, so that
    # ``with torch.device(...)`` keeps placing what the wrappers create.
    from torch.utils import _device

    _device._device_constructors()
    for name in FACTORIES:
        original = getattr(torch, name, None)
        if original is not None:
            patches.set(torch, name, _factory(original, name))
    _tensor_methods(torch.Tensor)
    _cuda_module()
    _amp()
    _distributed()
    _compile()
    _load()
    _device_context()
    from hpu_emulator import nvml

    nvml.install(patches)
