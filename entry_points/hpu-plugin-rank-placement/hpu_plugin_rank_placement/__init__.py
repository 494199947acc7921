"""Rank placement: where a quantized model goes, chosen per rank of a distributed job.

``HPU_RANK_PLACEMENT`` maps local ranks to devices, e.g. ``HPU_RANK_PLACEMENT=1=cpu``
keeps rank 1's quantized model on the CPU (say, a rank that only evaluates) while other
ranks go where the first-party plugin puts them, the current Gaudi device. The value
``hpu`` means that current device. The rank is ``LOCAL_RANK``, as ``torchrun`` and
``accelerate launch`` set it; a process without it is rank 0.

A placement the user passed (``device_map=``) is never replaced: the hook returns
``None`` then, and the hosts would not replace it anyway.

It overrides the first-party placement, so it asks for precedence with ``tryfirst=True``;
a plain implementation would be asked only after the first-party one had decided. A bad
value is refused with :class:`~hpu_plugin.hookspecs.Refusal`, which reaches the user
before loading starts, naming the variable and the fix.
"""

from __future__ import annotations

import os
import re
from typing import Any

from hpu_plugin.hookspecs import Refusal, hookimpl

VARIABLE = "HPU_RANK_PLACEMENT"
_PAIR = re.compile(r"^\s*(\d+)\s*=\s*(hpu|cpu)\s*$")


def placement_table(raw: str) -> dict[int, str]:
    """``"0=hpu,1=cpu"`` -> ``{0: "hpu", 1: "cpu"}``; raise :class:`Refusal` on a bad value."""
    table: dict[int, str] = {}
    for part in filter(str.strip, raw.split(",")):
        match = _PAIR.match(part)
        if match is None:
            raise Refusal(
                f"{VARIABLE}={raw!r}: {part.strip()!r} is not RANK=DEVICE: write pairs such "
                "as 0=hpu,1=cpu (devices: hpu, cpu), or unset it."
            )
        table[int(match.group(1))] = match.group(2)
    return table


def _local_rank() -> int:
    raw = os.environ.get("LOCAL_RANK", "0")
    try:
        return int(raw)
    except ValueError:
        raise Refusal(f"LOCAL_RANK={raw!r} is not a rank: the launcher sets an integer; "
                      "unset it for a single process.") from None


@hookimpl(tryfirst=True)
def hpu_quantization_device_map(
    method: str, bits: int, device_map: Any
) -> dict[str, str] | None:
    if device_map is not None:
        return None
    device = placement_table(os.environ.get(VARIABLE, "")).get(_local_rank())
    if device is None:
        return None  # not ours to place: the first-party plugin decides
    if device == "cpu":
        return {"": "cpu"}
    import torch  # imported here, not at module level: keep the plugin's import cheap

    return {"": f"hpu:{torch.hpu.current_device()}"}
