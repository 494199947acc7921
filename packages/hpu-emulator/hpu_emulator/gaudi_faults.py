"""Faults of the Gaudi software stack that the emulator reproduces, so that workarounds show.

Only faults with a public source are modelled:

- ``gather`` of an int64 input fails to compile on Gaudi ("Graph compile failed with
  synStatus 26 [Generic failure]"): Transformers' ``is_torch_hpu_available`` (4.53 on)
  works around it with that comment, and its Gaudi patch tracker (huggingface/transformers
  issue 39175, observed on Gaudi3) lists it. ``take_along_dim`` reaches the same kernel.
- ``masked_fill_`` of an int64 tensor fails on first-generation Gaudi ("synNodeCreateWithId
  failed for node: masked_fill_fwd_i64 with synStatus 26 [Generic failure]"): Transformers
  4.51 to 4.53 work around it on Gaudi1 only, quoting that message in
  ``is_torch_hpu_available``, and issue 39175 lists it as "only on Gaudi1". ``masked_fill``
  reaches the same kernel.

The refusal is a kernel for the HPU dispatch key that calls the kernel registered before it
(the emulator's fallback) for every other input; CPU ops never see it.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from hpu_emulator import ops

GATHER_INT64 = (
    "Graph compile failed with synStatus 26 [Generic failure] (gather of an int64 input on "
    "Gaudi; fix: gather an int32 copy and cast back, as Transformers' HPU support does)"
)


MASKED_FILL_INT64 = (
    "synNodeCreateWithId failed for node: masked_fill_fwd_i64 with synStatus 26 [Generic "
    "failure] (masked_fill_ of an int64 tensor on first-generation Gaudi; fix: "
    "tensor[mask] = value, as Transformers 4.51-4.53 do on Gaudi1)"
)


def _refusing_int64_masked_fill(original: Any) -> Any:
    def masked_fill_(keyset: Any, self: torch.Tensor, mask: torch.Tensor,
                     value: Any) -> torch.Tensor:
        if self.dtype == torch.int64:
            raise RuntimeError(MASKED_FILL_INT64)
        return original.call_boxed(keyset, self, mask, value)

    return masked_fill_


def _first_generation() -> bool:
    from hpu_emulator import runtime

    return runtime.current_config().generation == "gaudi"


def _refusing_int64_gather(original: Any) -> Any:
    def gather(keyset: Any, self: torch.Tensor, dim: int, index: torch.Tensor,
               *, sparse_grad: bool = False) -> torch.Tensor:
        if self.dtype == torch.int64:
            raise RuntimeError(GATHER_INT64)
        return original.call_boxed(keyset, self, dim, index, sparse_grad=sparse_grad)

    return gather


def register() -> bool:
    """Install the modelled faults once; ``False`` when torch cannot (no ``get_kernel``)."""
    with ops.lock:
        if ops.registered(__name__):
            return True
        get_kernel = getattr(torch.library, "get_kernel", None)
        if get_kernel is None:  # torch < 2.9: the fault stays unmodelled
            return False
        library = ops.library(__name__, "aten", "IMPL")
        with warnings.catch_warnings():  # "Overriding a previously registered kernel"
            warnings.simplefilter("ignore", UserWarning)
            library.impl("gather", _refusing_int64_gather(get_kernel("aten::gather", "HPU")),
                         "HPU", with_keyset=True)
            if _first_generation():
                for op in ("masked_fill_.Scalar", "masked_fill_.Tensor"):
                    kernel = _refusing_int64_masked_fill(get_kernel(f"aten::{op}", "HPU"))
                    library.impl(op, kernel, "HPU", with_keyset=True)
        return True


def unregister() -> None:
    """Remove the modelled faults (the earlier kernels become active again)."""
    ops.drop(__name__)
