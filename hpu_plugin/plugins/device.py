"""HPU device provider: is Gaudi ready, which device, which generation.

Written against the real ``habana_frameworks``/``torch.hpu`` API only; the emulator stands
in for that API, so this module has no branch for it. The facts it applies (defaults, the
job's device selection) come from ``hpu_plugin.gaudi``.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Mapping, MutableMapping

from hpu_plugin.gaudi.environment import apply_defaults
from hpu_plugin.hookspecs import DeviceProperties, hookimpl
from hpu_plugin.machine import check_this_process

log = logging.getLogger("hpu_plugin")


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
    # Which device this process takes is decided by the launcher's variables and
    # HABANA_VISIBLE_MODULES; a selection that cannot work for this process is refused here,
    # when a host first asks for the device. The group's own rules wait for a group to start
    # (the DDP plugin): processes that each run their own inference form none.
    placement = check_this_process(os.environ, group=False)
    if placement is not None:
        placement.log_warnings(log)
    return DeviceProperties(
        device_type="hpu",
        count=hpu.device_count(),
        current=hpu.current_device(),
        generation=hpu.get_device_name(),
    )


@hookimpl
def hpu_job_facts(environ: Mapping[str, str]) -> dict[str, str] | None:
    """The Gaudi generation: every rank of a job must run on the same one."""
    import torch

    hpu = getattr(torch, "hpu", None)
    if hpu is None or not hpu.is_available():
        return None
    return {"Gaudi generation": hpu.get_device_name()}
