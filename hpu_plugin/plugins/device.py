"""HPU device provider: is Gaudi ready, which device, which generation.

Written against the real ``habana_frameworks``/``torch.hpu`` API only; the emulator stands
in for that API, so this module has no branch for it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import MutableMapping

from hpu_plugin.gaudi.environment import apply_defaults
from hpu_plugin.hookspecs import DeviceProperties, hookimpl


@hookimpl
def hpu_prepare_environment(environ: MutableMapping[str, str]) -> None:
    apply_defaults(environ)


@hookimpl
def hpu_device_available() -> bool | None:
    if importlib.util.find_spec("habana_frameworks") is None:
        return None
    # In lazy mode this import is what creates torch.hpu; in eager mode it is a no-op.
    import habana_frameworks.torch  # noqa: F401
    import torch

    hpu = getattr(torch, "hpu", None)
    return bool(hpu is not None and hpu.is_available())


@hookimpl
def hpu_device_properties() -> DeviceProperties | None:
    import torch

    hpu = getattr(torch, "hpu", None)
    if hpu is None or not hpu.is_available():
        return None
    return DeviceProperties(
        device_type="hpu",
        count=hpu.device_count(),
        current=hpu.current_device(),
        generation=hpu.get_device_name(),
    )
