"""The contract between the host libraries and every plugin, first-party or third-party.

Host adapters (``hpu_plugin.hosts``) call these hooks at the host libraries' decision
points, through ``hpu_plugin.registry``; plugins implement them with ``@hookimpl`` and are
found through the ``hpu_plugin`` entry-point group. Deciding hooks are ``firstresult``:
the first implementation that returns something other than ``None`` decides, so ``None``
always means "no opinion, ask the next one".

Call order, for every hook (see ``docs/writing-a-plugin.md``):

1. wrappers (``wrapper=True``) are entered first and left last; each sees the decision of
   everything inside it and may replace it, or see and handle a :class:`Refusal`
   (pluggy's old-style ``hookwrapper=True`` is not accepted: write ``wrapper=True``);
2. ``tryfirst=True`` implementations;
3. plain implementations: the first-party plugin first, then third-party plugins in
   ascending entry-point name;
4. ``trylast=True`` implementations, asked only when all the others returned ``None``.

So a third party overrides a first-party decision only when it asks to (``tryfirst`` or a
wrapper), and ``trylast`` makes it a fallback. The registry fixes this order itself
(third-party plugins are registered before first-party ones, by name); it does not depend
on the order in which entry points are found.

An answer other than ``None`` must have the type the spec declares, items included, and
mean something the host can use: each spec's one check is declared beside it with
:func:`answers`. The guard (:mod:`hpu_plugin.guard`) applies it; a failure is a plugin
fault, reported and skipped like an exception, so the decision falls to the next
implementation.
No hook takes a device type: the hosts ask only at their HPU decision points, so it would
always be ``"hpu"``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, TypeVar

import pluggy

from hpu_plugin.errors import Refusal as Refusal  # the documented import path

PROJECT = "hpu_plugin"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

#: A check of a hook's answers: ``check(answer, call arguments)`` is what is wrong with the
#: answer, in words the plugin's author can act on, or ``None`` when it is usable.
Check = Callable[[Any, Mapping[str, Any]], str | None]
#: The one check of each deciding hook, declared beside its spec with :func:`answers`.
CHECKS: dict[str, Check] = {}
_F = TypeVar("_F", bound=Callable[..., Any])


def answers(check: Check) -> Callable[[_F], _F]:
    """Declare the check of the decorated spec's answers (``None`` is never checked)."""

    def declare(spec: _F) -> _F:
        CHECKS[spec.__name__] = check
        return spec

    return declare


def _not_allowed(expected: str) -> str:
    return f"the hook spec does not allow its type (expected {expected} or None)"


def _of(kind: type) -> Check:
    """The check of a hook whose answer is one plain type."""
    return lambda value, call: (None if isinstance(value, kind)
                                else _not_allowed(kind.__name__))


#: A ``torch.compile`` backend: a registered name or a callable.
CompileBackend = str | Callable[..., Any]
#: A ``from_pretrained`` device map: a device string or a module-name-to-device mapping.
DeviceMap = str | dict[str, Any]


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

    Called once, inside ``import torch``, before ``habana_frameworks.torch`` is imported.
    Every implementation is called. Set only what the user left unset
    (``environ.setdefault``): a value the user exported is theirs. Return value ignored.
    ``environ`` is a copy of ``os.environ``: activation exports what the hooks changed
    afterwards, recorded, and takes it back if the plugin ends failed.
    """


@answers(_of(bool))
@hookspec(firstresult=True)
def hpu_device_available() -> bool | None:
    """Is a Gaudi device ready for this process?

    Called once per process (the answer is cached) when a host library asks whether HPU
    is available (Transformers' ``is_torch_hpu_available``, Accelerate's
    ``is_hpu_available``) and at activation. ``True``/``False`` decides; ``None`` defers.
    A provider for another device type returns ``None``. To hide Gaudi from the hosts,
    return ``False`` from a ``tryfirst`` implementation.
    """


def _properties_problem(value: object, call: Mapping[str, Any]) -> str | None:
    fields = (str, int, int, str)
    if isinstance(value, DeviceProperties) and all(
            isinstance(getattr(value, name), kind)
            for name, kind in zip(DeviceProperties.__dataclass_fields__, fields, strict=True)):
        return None
    return _not_allowed("DeviceProperties(str, int, int, str)")


@answers(_properties_problem)
@hookspec(firstresult=True)
def hpu_device_properties() -> DeviceProperties | None:
    """Describe the device this process uses: type, count, current index, generation.

    Called after ``hpu_device_available`` returned ``True``, whenever a host needs a
    device (placement, process count, diagnostics); not cached, since the current device
    may change. ``None`` defers to the next provider.
    """


#: The backend the Gaudi software registers with dynamo as it loads: a plugin may name it
#: before that has happened.
GAUDI_COMPILE_BACKEND = "hpu_backend"


def _compile_backend_problem(value: object, call: Mapping[str, Any]) -> str | None:
    """A backend named by a string must be Gaudi's or one dynamo knows; otherwise
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
def hpu_compile_backend(
    requested: CompileBackend | None
) -> CompileBackend | None:
    """Choose the ``torch.compile`` backend for one call.

    Called on every ``torch.compile`` call (and every ``@torch.compile`` decoration) while
    Gaudi is active. ``requested`` is what the caller passed (``None`` when they passed
    nothing). Return the backend to use, or
    ``None`` to keep ``requested``. May raise :class:`Refusal` when compiling cannot work
    (lazy mode). A backend other than ``requested`` is logged once per
    distinct requested backend by the host adapter.
    """


@answers(_of(str))
@hookspec(firstresult=True)
def hpu_ddp_backend(requested: str | None) -> str | None:
    """Choose the collective backend of a distributed job on Gaudi.

    Called when a host library is about to initialise a process group (Accelerate's
    ``PartialState``, Transformers' ``TrainingArguments``, ``init_process_group`` with
    no backend). ``requested`` is the backend the user named (``ddp_backend=``,
    ``backend=``), or ``None``. Return the backend name, or ``None`` for no opinion. The
    hosts never replace a backend the user named; an implementation may raise
    :class:`Refusal` for a combination that cannot work, before any collective runs.
    """


def _facts_problem(value: object, call: Mapping[str, Any]) -> str | None:
    if isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str)
                                       for k, v in value.items()):
        return None
    return _not_allowed("dict[str, str]")


@answers(_facts_problem)
@hookspec
def hpu_job_facts(environ: Mapping[str, str]) -> dict[str, str] | None:
    """What this process sees that every rank of a job must see alike (strings by name).

    Called when an ``hccl`` process group starts; the host publishes the merged facts of all
    plugins through the group's store and stops the job if a rank differs
    (:mod:`hpu_plugin.gaudi.preflight`). Return ``None`` for nothing to add.
    """


_DEVICE = r"([a-z_]+)(?::([0-9]+))?"
_MAP_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")


def _device_map_problem(value: object, call: Mapping[str, Any]) -> str | None:
    """A device map must place modules on an HPU, the CPU or disk."""
    import re

    allowed = {"hpu", "cpu", "disk", "meta"}
    if not isinstance(value, str | dict) or (isinstance(value, dict) and not all(
            isinstance(key, str) for key in value)):
        return _not_allowed("str or dict[str, Any]")
    if isinstance(value, str) and value in _MAP_STRATEGIES:
        return None
    entries = list(value.items()) if isinstance(value, dict) else [("", value)]
    for key, where in entries:
        if isinstance(where, int) and not isinstance(where, bool) and where >= 0:
            continue
        match = re.fullmatch(_DEVICE, str(where), re.ASCII)
        if match is None or match.group(1) not in allowed:
            return (f"its device map places {key or 'the model'!r} on {where!r}, which is "
                    "not an hpu, cpu or disk device")
    return None


@answers(_device_map_problem)
@hookspec(firstresult=True)
def hpu_quantization_device_map(
    method: str,
    bits: int,
    device_map: DeviceMap | None,
    options: Mapping[str, Any],
) -> DeviceMap | None:
    """Place a quantized model.

    Called by the quantizer adapters before weights load, with the quantization
    ``method`` (``"bitsandbytes"``, or ``"gaudi_fp8"``: Neural Compressor's fp8, bits 8),
    its ``bits`` (4 or 8) and the user's ``device_map`` (``None`` when they passed none).
    ``options`` are the method's settings that decide whether the device can run it, as
    plain values: for bitsandbytes 4-bit ``quant_type`` ("nf4", "fp4"), ``quant_storage``
    and ``compute_dtype`` (torch dtypes), for gaudi_fp8 ``mode`` ("measure" or
    "quantize"); empty when the host has none to give. Return the device map to use, or
    ``None`` for no opinion. The hosts never replace a ``device_map`` the user passed. May raise
    :class:`Refusal` for a method or bit width the device cannot run, before loading starts.
    """


def _buckets_problem(value: object, call: Mapping[str, Any]) -> str | None:
    """Buckets the host can pad to: ascending positive sizes, each once."""
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

    Called by the host adapters before they run a compiled model on Gaudi with a
    size that varies from call to call (``generate()``, ``pipeline()``, ``Trainer``), once
    per call and ``kind``: ``"length"`` (tokens of a prompt or of a training batch),
    ``"batch"`` (sequences generated together) or ``"cache"`` (length of a static
    key-value cache: prompt plus new tokens). ``limit`` is the largest size the host can
    use (the model's maximum positions), or ``None`` when unknown.

    Return the bucket sizes, ascending positive integers: the host pads a size up to the
    smallest bucket at least as large and leaves a size above the last bucket unpadded.
    An empty tuple turns bucketing of that kind off. ``None`` is no opinion; when no
    implementation has one, the host pads nothing. A result that is not ascending positive
    integers is a plugin fault: reported once, and that call is not bucketed. The hosts pad
    only where padding changes no result and the user chose nothing that decides the shape
    (``pad_to_multiple_of``, ``cache_implementation``, a cache object...); those always win.
    The first-party ``shapes`` plugin answers from ``HPU_PLUGIN_BUCKETS*``; a third party
    replaces its buckets with a ``tryfirst`` implementation or a wrapper. May raise
    :class:`Refusal` for a setting it cannot use.
    """


@answers(_of(bool))
@hookspec(firstresult=True)
def hpu_fast_path(name: str, context: Mapping[str, Any]) -> bool | None:
    """Should one of Gaudi's fast paths replace the ordinary path here?

    Called by the host adapters where unchanged code could take a Gaudi fast path, once per
    object that would take it (an optimizer, a model, a ``generate()`` call), and by
    ``hpu-plugin info`` with an empty ``context``. ``name`` is one of
    ``"fused_optimizer"`` (AdamW/SGD stepped by the fused optimizer kernel),
    ``"fused_clip_norm"`` (gradient clipping by the fused clip-norm kernel),
    ``"fused_sdpa"``, ``"fused_rms_norm"`` and ``"fused_rope"`` (a Transformers model's
    attention, RMSNorm layers and rotary embeddings by the fused kernels),
    ``"fused_moe"`` (a Transformers 5 model's mixture-of-experts layers by the fused MoE
    kernel, asked when the model is made and at each call; ``context`` names the model's
    or the experts module's class), ``"device_masks"`` (attention masks on ``hpu`` built
    on the device instead of read on the host to see whether they pad anything; asked at
    each forward with such a mask) and ``"inference_graphs"`` (the decoding steps of an
    eager model's ``generate()`` run as graphs);
    ``context`` holds plain facts of the case (``"optimizer"``: its class name, ``"model"``:
    the model type, ...). ``True`` takes the fast path, ``False`` keeps the ordinary one,
    ``None`` is no opinion (ordinary path when nobody has one). The hosts take a fast path
    only where it gives the ordinary path's results; an answer of ``True`` cannot force one
    where the host found it does not fit (a compiled or training model for HPU graphs, an
    optimizer option the kernel lacks). The first-party ``fast_paths`` plugin answers from
    ``HPU_PLUGIN_FAST`` and ``HPU_PLUGIN_FAST_<NAME>``; a third party that brings its
    own kernel returns ``False`` from a ``tryfirst`` implementation and installs it.
    """
