"""CPU reference implementations of Gaudi-only custom ops that host libraries call.

Only the Gaudi software (``habana_frameworks``, from the gaudi-pytorch-bridge) defines the
``torch.ops.hpu.*`` custom ops. Libraries with an HPU backend call some of them directly;
on the emulator they would fail with "no such operator". This module defines the ones
they call, with the real schema, so that the libraries' own HPU code paths run unchanged.

Ops provided:

``hpu::dequantize_nf4``
    Called by bitsandbytes' HPU backend (``bitsandbytes/backends/hpu/ops.py``, kernel of
    ``bitsandbytes::dequantize_4bit``) for every 4-bit NF4 weight it dequantizes. Schema
    as the gaudi-pytorch-bridge declares it (``TORCH_LIBRARY(hpu, m)`` in its eager op
    registrations; kernel ``hpu_ops/backend/nf4_ops.cpp``, TPC ``cast_packed_nf4_to_<dtype>``):
    ``dequantize_nf4(Tensor input, Tensor absmax, SymInt blocksize, int[] out_shape,
    ScalarType out_dtype) -> Tensor``.

The ops behind the ``hpex`` kernels, fused optimizers and fp8 (FusedSDPA's ``sdpa_*``,
``rms_norm``, ``rotary_pos_embedding``, ``mixture_of_experts``, ``optimizer_adamw``,
``cast_to_fp8_v2``, ...) live in ``hpu_emulator.kernels``; :func:`register` registers
them too.

Registration happens only while emulating: the emulator's ``start()`` imports this module
(or calls :func:`register`), and it never runs when the real ``habana_frameworks`` is
installed. Importing it in a process without a started emulator (tests) defines nothing.
As a second guard, :func:`register` leaves an already defined op alone.
"""

from __future__ import annotations

import importlib.metadata
import logging
import math
from collections.abc import Sequence

import torch

from hpu_emulator import ops

log = logging.getLogger("hpu_plugin")

NAMESPACE = ops.NAMESPACE
DEQUANTIZE_NF4_SCHEMA = (
    "dequantize_nf4(Tensor input, Tensor absmax, SymInt blocksize, int[] out_shape, "
    "ScalarType out_dtype) -> Tensor"
)

#: The 16 NF4 levels (QLoRA, Dettmers et al. 2023, appendix E): quantiles of N(0, 1)
#: normalised to [-1, 1], with an exact zero. Index = 4-bit code.
NF4_LEVELS: tuple[float, ...] = (
    -1.0,
    -0.6961928009986877,
    -0.5250730514526367,
    -0.39491748809814453,
    -0.28444138169288635,
    -0.18477343022823334,
    -0.09105003625154495,
    0.0,
    0.07958029955625534,
    0.16093020141124725,
    0.24611230194568634,
    0.33791524171829224,
    0.44070982933044434,
    0.5626170039176941,
    0.7229568362236023,
    1.0,
)

#: Gaudi software from this release on reads bitsandbytes' packing (first element in the
#: high nibble); older releases read the first element from the low nibble, which is why
#: bitsandbytes swaps nibbles for them (``backends/hpu/ops.py``, ``GAUDI_SW_VER`` < 1.22).
HIGH_NIBBLE_FIRST_SINCE = (1, 22)

_high_nibble_first = True


def gaudi_software_version() -> tuple[int, int] | None:
    """(major, minor) of the installed ``habana-torch-plugin`` distribution, if any.

    Read from the same place bitsandbytes reads it (``importlib.metadata``), so that the
    emulated op unpacks nibbles in the order bitsandbytes packed them for this version.
    """
    try:
        raw = importlib.metadata.version("habana-torch-plugin")
    except importlib.metadata.PackageNotFoundError:
        return None
    parts = raw.split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return None


def dequantize_nf4(
    input: torch.Tensor,
    absmax: torch.Tensor,
    blocksize: int,
    out_shape: Sequence[int],
    out_dtype: torch.dtype,
    *,
    high_nibble_first: bool = True,
) -> torch.Tensor:
    """Unpack NF4 codes, two per byte, and scale each block of ``blocksize`` by its absmax.

    ``input`` holds ``ceil(prod(out_shape) / 2)`` bytes (any shape; read flat), ``absmax``
    one scale per block (the last block may be partial). The product is taken in float32
    and rounded once to ``out_dtype``. Runs with ordinary torch ops on the inputs' device,
    so on the emulator it runs on ``hpu`` tensors like any other HPU op.
    """
    if input.dtype != torch.uint8:
        raise RuntimeError(
            f"hpu::dequantize_nf4: input must be packed NF4 in uint8, got {input.dtype}; "
            "view other storage as uint8 first (bitsandbytes does)"
        )
    if blocksize <= 0:
        raise RuntimeError(f"hpu::dequantize_nf4: blocksize must be positive, got {blocksize}")
    n = math.prod(out_shape)
    packed = input.reshape(-1)
    if packed.numel() * 2 < n:
        raise RuntimeError(
            f"hpu::dequantize_nf4: input holds {packed.numel() * 2} values, out_shape "
            f"{list(out_shape)} needs {n}"
        )
    blocks = -(-n // blocksize)
    scales = absmax.reshape(-1)
    if scales.numel() < blocks:
        raise RuntimeError(
            f"hpu::dequantize_nf4: absmax has {scales.numel()} scales, {blocks} blocks of "
            f"{blocksize} need one each"
        )
    first = packed >> 4 if high_nibble_first else packed & 0xF
    second = packed & 0xF if high_nibble_first else packed >> 4
    codes = torch.stack((first, second), dim=1).reshape(-1)[:n].long()
    levels = torch.tensor(NF4_LEVELS, dtype=torch.float32, device=input.device)
    values = levels[codes]
    full = (n // blocksize) * blocksize
    out = torch.empty(n, dtype=torch.float32, device=input.device)
    if full:
        head = values[:full].view(-1, blocksize) * scales[: full // blocksize].float().view(-1, 1)
        out[:full] = head.reshape(-1)
    if full < n:
        out[full:] = values[full:] * scales[full // blocksize].float()
    return out.to(out_dtype).reshape(tuple(out_shape))


def _dequantize_nf4_kernel(
    input: torch.Tensor,
    absmax: torch.Tensor,
    blocksize: int,
    out_shape: Sequence[int],
    out_dtype: torch.dtype,
) -> torch.Tensor:
    return dequantize_nf4(
        input, absmax, blocksize, out_shape, out_dtype, high_nibble_first=_high_nibble_first
    )


def _dequantize_nf4_fake(
    input: torch.Tensor,
    absmax: torch.Tensor,
    blocksize: int,
    out_shape: Sequence[int],
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """Shape and dtype only, for tracing under ``torch.compile`` (``hpu_backend``)."""
    return input.new_empty(tuple(out_shape), dtype=out_dtype)


def register() -> bool:
    """Define the stand-in ops under ``torch.ops.hpu``; idempotent.

    Returns ``True`` when the ops are ours (now or from an earlier call), ``False`` when
    another definition was already present (the real Gaudi software) and was left alone.
    """
    global _high_nibble_first
    with ops.lock:
        if ops.registered(__name__):
            return True
        if ops.defined("dequantize_nf4"):
            log.debug("hpu_plugin: hpu::dequantize_nf4 already defined; emulated op not registered")
            return False
        version = gaudi_software_version()
        _high_nibble_first = version is None or version >= HIGH_NIBBLE_FIRST_SINCE
        library = ops.library(__name__)
        library.define(DEQUANTIZE_NF4_SCHEMA)
        # One kernel for every backend: it is written with ordinary torch ops, which run on
        # the emulated device (and on CPU, for tests without the emulator).
        library.impl("dequantize_nf4", _dequantize_nf4_kernel, "CompositeExplicitAutograd")
        torch.library.register_fake(
            f"{NAMESPACE}::dequantize_nf4", _dequantize_nf4_fake, lib=library
        )
    from hpu_emulator import kernels

    kernels.register()
    return True


def _register_if_emulating() -> None:
    """Importing this module from the emulator's ``start()`` is enough to define the ops."""
    from hpu_emulator import runtime

    if runtime.started():
        register()


_register_if_emulating()
