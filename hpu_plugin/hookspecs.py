"""The contract between the host libraries and every plugin, first-party or third-party.

Host adapters call these hooks at the hosts' decision points, through
``hpu_plugin.registry``; plugins implement them with ``@hookimpl`` and are found through
the ``hpu_plugin`` entry-point group. Deciding hooks are ``firstresult``: the first answer
other than ``None`` decides, so ``None`` means "no opinion, ask the next one".

Call order (docs/writing-a-plugin.md): wrappers (``wrapper=True``; entered first, left last,
they see and may replace the decision, or see a :class:`Refusal`), then ``tryfirst`` and
plain implementations (among ``tryfirst`` third parties first, among plain the first-party
plugin first; equals by ascending entry-point name), then ``trylast``. So a third party
overrides a first-party decision only when it asks to, and then always can.

An answer must have the type the spec declares and mean something the host can use: each
spec's one check is declared beside it with :func:`answers`, and the guard
(:mod:`hpu_plugin.guard`) treats a failed check as a plugin fault, so the decision falls to
the next implementation. No hook takes a device type: hosts ask only at HPU decision points.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, fields
from typing import Any, TypeVar

import pluggy

from hpu_plugin.errors import Refusal as Refusal  # the documented import path

PROJECT = "hpu_plugin"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

#: ``check(answer, call arguments)``: what is wrong with an answer, in words its author can
#: act on, or ``None`` when it is usable.
Check = Callable[[Any, Mapping[str, Any]], str | None]
#: The one check of each deciding hook, by hook name.
CHECKS: dict[str, Check] = {}
_F = TypeVar("_F", bound=Callable[..., Any])

#: A ``torch.compile`` backend: a registered name or a callable.
CompileBackend = str | Callable[..., Any]
#: A ``from_pretrained`` device map: a device string or a module-name-to-device mapping.
DeviceMap = str | dict[str, Any]
#: The backend the Gaudi software registers with dynamo as it loads.
GAUDI_COMPILE_BACKEND = "hpu_backend"


def answers(check: Check) -> Callable[[_F], _F]:
    """Declare the check of the decorated spec's answers (``None`` is never checked)."""

    def declare(spec: _F) -> _F:
        CHECKS[spec.__name__] = check
        return spec

    return declare


def _not_allowed(expected: str) -> str:
    return f"the hook spec does not allow its type (expected {expected} or None)"


def _of(kind: type) -> Check:
    return lambda value, call: None if isinstance(value, kind) else _not_allowed(kind.__name__)


@dataclass(frozen=True)
class DeviceProperties:
    """What the device provider knows about the accelerator this process will use."""

    device_type: str  # the torch device type, "hpu"
    count: int  # devices visible to this process
    current: int  # index of the device this process uses
    generation: str  # "GAUDI", "GAUDI2" or "GAUDI3", as torch.hpu.get_device_name()


@hookspec
def hpu_prepare_environment(environ: MutableMapping[str, str]) -> None:
    """Set environment defaults before the Gaudi software initialises.

    Called once, inside ``import torch``, before ``habana_frameworks.torch`` is imported;
    every implementation is called, the return value ignored. ``environ`` is a copy of
    ``os.environ``: set only what the user left unset (``environ.setdefault``). Activation
    exports what the hooks added, and takes it back if the plugin ends failed.
    """


@answers(_of(bool))
@hookspec(firstresult=True)
def hpu_device_available() -> bool | None:
    """Is a Gaudi device ready for this process?

    Called at activation and when a host asks whether HPU is available (Transformers'
    ``is_torch_hpu_available``, Accelerate's ``is_hpu_available``); the answer is cached for
    the process. To hide Gaudi from the hosts, return ``False`` from a ``tryfirst``
    implementation.
    """


def _properties_problem(value: object, call: Mapping[str, Any]) -> str | None:
    """Hosts place tensors and start processes by these: a wrong one fails far away."""
    if not isinstance(value, DeviceProperties) or not all(
            isinstance(getattr(value, f.name), int if f.type in (int, "int") else str)
            for f in fields(DeviceProperties)):
        return _not_allowed("DeviceProperties(str, int, int, str)")
    if value.device_type != "hpu":
        return f"its device_type is {value.device_type!r}, not 'hpu'"
    if not 0 <= value.current < value.count:
        return f"its current device {value.current} is not one of its {value.count} devices"
    return None  # the generation is the Gaudi software's own name for the device, any text


@answers(_properties_problem)
@hookspec(firstresult=True)
def hpu_device_properties() -> DeviceProperties | None:
    """Describe the device this process uses: type, count, current index, generation.

    Called after ``hpu_device_available`` said ``True``, whenever a host needs a device
    (placement, process count, diagnostics); not cached, as the current device may change.
    """


def _compile_backend_problem(value: object, call: Mapping[str, Any]) -> str | None:
    """A backend named by a string must be Gaudi's or one dynamo knows: else
    ``torch.compile`` fails later in dynamo without naming the plugin."""
    if not isinstance(value, str):
        return None if callable(value) else _not_allowed("str or a callable")
    if value == GAUDI_COMPILE_BACKEND:
        return None
    if not value:
        return "it named an empty compile backend"
    try:
        from torch._dynamo.backends import registry
    except Exception:  # no dynamo to ask: the host reports what it cannot compile
        return None
    try:
        registry.lookup_backend(value)
    except Exception:
        return f"it named the compile backend {value!r}, which torch._dynamo does not know"
    return None


@answers(_compile_backend_problem)
@hookspec(firstresult=True)
def hpu_compile_backend(requested: CompileBackend | None) -> CompileBackend | None:
    """Choose the ``torch.compile`` backend for one call.

    Called on every ``torch.compile`` call and ``@torch.compile`` decoration while Gaudi is
    active, with what the caller passed (``None`` for nothing). ``None`` keeps
    ``requested``. May raise :class:`Refusal` where compiling cannot work (lazy mode). The
    host logs a replaced backend once per backend requested.
    """


def _ddp_backend_problem(value: object, call: Mapping[str, Any]) -> str | None:
    """A backend name as torch reads it: the hosts compare it with ``'hccl'`` as written."""
    if not isinstance(value, str):
        return _not_allowed("str")
    if not value or value != value.strip().lower():
        return (f"it named the backend {value!r}: a backend is a lower-case name as torch "
                "reads it, such as 'hccl' or 'gloo'")
    return None


@answers(_ddp_backend_problem)
@hookspec(firstresult=True)
def hpu_ddp_backend(requested: str | None) -> str | None:
    """Choose the collective backend of a distributed job on Gaudi.

    Called when a host is about to start a process group (Accelerate's ``PartialState``,
    ``TrainingArguments``, ``init_process_group`` with no backend), with the backend the user
    named (``ddp_backend=``, ``backend=``), lower-cased as torch reads it, or ``None``. The
    hosts never replace a backend the user named. May raise :class:`Refusal` for a
    combination that cannot work, before any collective runs.
    """


@answers(lambda value, call: None if isinstance(value, dict) and all(
    isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    else _not_allowed("dict[str, str]"))
@hookspec
def hpu_job_facts(environ: Mapping[str, str]) -> dict[str, str] | None:
    """What this process sees that every rank of a job must see alike (strings by name).

    Called when an ``hccl`` process group starts: the host publishes every plugin's facts
    through the group's store and stops the job if a rank differs
    (:mod:`hpu_plugin.gaudi.preflight`). ``None`` adds nothing.
    """


def _device_map_problem(value: object, call: Mapping[str, Any]) -> str | None:
    """A device map must place modules on this process's HPU (index 0), the CPU or disk."""
    if not isinstance(value, str | dict) or (isinstance(value, dict) and not all(
            isinstance(key, str) for key in value)):
        return _not_allowed("str or dict[str, Any]")
    if value in ("auto", "balanced", "balanced_low_0", "sequential"):
        return None
    for key, where in value.items() if isinstance(value, dict) else [("", value)]:
        index = where if isinstance(where, int) and not isinstance(where, bool) else None
        match = re.fullmatch(r"([a-z_]+)(?::([0-9]+))?", str(where), re.ASCII)
        if index is None and (match is None or match.group(1) not in {"hpu", "cpu", "disk"}):
            return (f"its device map places {key or 'the model'!r} on {where!r}, which is "
                    "not an hpu, cpu or disk device")
        if index not in (None, 0) or (match and match.group(1) == "hpu" and match.group(2)
                                      not in (None, "0")):
            return (f"its device map places {key or 'the model'!r} on {where!r}: a Gaudi "
                    "process drives one device, hpu:0 (0)")
    return None


@answers(_device_map_problem)
@hookspec(firstresult=True)
def hpu_quantization_device_map(
    method: str, bits: int, device_map: DeviceMap | None, options: Mapping[str, Any],
) -> DeviceMap | None:
    """Place a quantized model.

    Called by the quantizer adapters before weights load, with the ``method``
    (``"bitsandbytes"``, or ``"gaudi_fp8"``: Neural Compressor's fp8, 8 bits), its ``bits``
    and the user's ``device_map`` (``None`` for none). ``options`` are the method's settings
    that decide whether the device can run it, as plain values (bitsandbytes 4-bit:
    ``quant_type``, ``quant_storage``, ``compute_dtype``; gaudi_fp8: ``mode``), empty when
    the host has none. The hosts never replace a ``device_map`` the user passed. May raise
    :class:`Refusal` for a method or bit width the device cannot run, before loading starts.
    """


def _buckets_problem(value: object, call: Mapping[str, Any]) -> str | None:
    if not isinstance(value, tuple) or not all(isinstance(size, int) for size in value):
        return _not_allowed("tuple[int, ...]")
    if any(size <= 0 or isinstance(size, bool) for size in value) or list(value) != sorted(
            set(value)):
        return "bucket sizes must be ascending positive integers, each once"
    return None


@answers(_buckets_problem)
@hookspec(firstresult=True)
def hpu_shape_buckets(kind: str, limit: int | None) -> tuple[int, ...] | None:
    """The sizes a host pads a varying dimension up to, so a compiled graph sees few shapes.

    Called before a host runs a compiled model on Gaudi with a size that varies between
    calls (``generate()``, ``pipeline()``, ``Trainer``), once per call and ``kind``:
    ``"length"`` (tokens of a prompt or batch), ``"batch"`` (sequences generated together)
    or ``"cache"`` (a static key-value cache: prompt plus new tokens). ``limit`` is the
    largest size the host can use, or ``None``. Return ascending positive sizes: a size is
    padded to the smallest bucket that holds it, one above the last is left as it is; an
    empty tuple turns that kind off. The hosts pad only where padding changes no result and
    the user chose nothing that decides the shape (``pad_to_multiple_of``, a cache...).
    """


@answers(_of(bool))
@hookspec(firstresult=True)
def hpu_fast_path(name: str, context: Mapping[str, Any]) -> bool | None:
    """Should one of Gaudi's fast paths replace the ordinary path here?

    Called where unchanged code could take a fast path, once per object that would take it
    (an optimizer, a model, a ``generate()`` call), and by ``hpu-plugin info`` with an empty
    ``context``. ``name`` is one of ``hpu_plugin.fast_paths.decisions.FAST_PATHS``
    (``fused_optimizer``, ``fused_clip_norm``, ``fused_sdpa``, ``fused_rms_norm``,
    ``fused_rope``, ``fused_moe``, ``device_masks``, ``inference_graphs``,
    ``training_graphs``, ``device_loss``, ``bucket_views``); ``context`` holds plain facts
    of the case (``"optimizer"``: its class name, ``"model"``: the model type, ...).
    ``True`` takes it, ``False`` keeps the ordinary path, nobody's opinion is no. ``True``
    cannot force a fast path where the host found it does not fit. A third party bringing
    its own kernel returns ``False`` from a ``tryfirst`` implementation and installs it.
    """
