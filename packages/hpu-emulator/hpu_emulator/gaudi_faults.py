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

The refusals are C++ kernels for the HPU dispatch key (``csrc/emulator.cpp``), as the
bridge's kernels are: a library's Python kernel over them (Transformers' workarounds, the
plugin's copy of them) is an override of a C++ kernel, which every torch release allows,
where a second Python kernel for the same op is refused by some (2.11). Every other input
runs the emulator's fallback; CPU ops never see them. The messages live here.
"""

from __future__ import annotations

from hpu_emulator import runtime

GATHER_INT64 = (
    "Graph compile failed with synStatus 26 [Generic failure] (gather of an int64 input on "
    "Gaudi; fix: gather an int32 copy and cast back, as Transformers' HPU support does)"
)


MASKED_FILL_INT64 = (
    "synNodeCreateWithId failed for node: masked_fill_fwd_i64 with synStatus 26 [Generic "
    "failure] (masked_fill_ of an int64 tensor on first-generation Gaudi; fix: "
    "tensor[mask] = value, as Transformers 4.51-4.53 do on Gaudi1)"
)


def _first_generation() -> bool:
    return runtime.current_config().generation == "gaudi"


def register() -> None:
    """Turn the modelled faults on for this process's emulated generation."""
    masked_fill = MASKED_FILL_INT64 if _first_generation() else ""
    runtime.extension().set_faults(GATHER_INT64, masked_fill)


def unregister() -> None:
    """Turn the modelled faults off."""
    runtime.extension().set_faults("", "")
