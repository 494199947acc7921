"""A third party's plugin, installed by the e2e tests: it overrides every hook.

Inert unless ``HPU_TEST_OVERRIDE=1``, so that an installation left behind changes nothing.
``HPU_TEST_OVERRIDE_HIDE=1`` hides Gaudi from the hosts. It imports only the contract.
"""

from __future__ import annotations

import os
from typing import Any

from hpu_plugin.hookspecs import DeviceProperties, hookimpl


def _on() -> bool:
    return os.environ.get("HPU_TEST_OVERRIDE") == "1"


@hookimpl(tryfirst=True)
def hpu_device_available() -> bool | None:
    if _on() and os.environ.get("HPU_TEST_OVERRIDE_HIDE") == "1":
        return False
    return None


@hookimpl(tryfirst=True)
def hpu_device_properties() -> DeviceProperties | None:
    if not _on():
        return None
    import torch

    # the last visible device, so that a host using 0 or the real current one shows
    count = torch.hpu.device_count()
    return DeviceProperties("hpu", count=count, current=count - 1,
                            generation=torch.hpu.get_device_name())


@hookimpl(tryfirst=True)
def hpu_compile_backend(requested: Any) -> Any:
    if not _on() or callable(requested):
        return None
    return "eager"


@hookimpl(tryfirst=True)
def hpu_ddp_backend(requested: str | None) -> str | None:
    if not _on() or requested is not None:
        return None
    return "gloo"


@hookimpl(tryfirst=True)
def hpu_quantization_device_map(method: str, bits: int, device_map: Any) -> Any:
    if not _on() or device_map is not None:
        return None
    return {"": "cpu"}
