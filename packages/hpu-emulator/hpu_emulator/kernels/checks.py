"""Argument checks shared by the emulated ``torch.ops.hpu`` kernels.

The bridge's kernels check with ``TORCH_CHECK``, which raises ``RuntimeError``; these do the
same, with a message that names the argument and what to change, before any work starts.
"""

from __future__ import annotations

import torch


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise RuntimeError(message)


def expect_float(op: str, name: str, tensor: torch.Tensor) -> None:
    expect(tensor.is_floating_point(),
           f"{op}: {name} must be a floating-point tensor, got {tensor.dtype}")


def expect_same_lengths(op: str, **lists: list[torch.Tensor]) -> None:
    """Tensor lists that the kernel walks together must be equally long."""
    lengths = {name: len(values) for name, values in lists.items()}
    expect(len(set(lengths.values())) <= 1,
           f"{op}: the tensor lists must have one length each, got {lengths}")
