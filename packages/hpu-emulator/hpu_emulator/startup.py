"""Bringing the emulator up: configuration, C++ runtime, ``torch.hpu``, stand-ins, shims.

Runs inside ``import torch`` (the activation entry point), so it imports no torch._dynamo and
no torch.distributed eagerly. It imports the parts it starts; they share state through
``runtime`` (which imports none of them), so nothing here is imported back.
"""

from __future__ import annotations

import atexit
import time

from hpu_emulator import config, runtime
from hpu_emulator.errors import EmulationError
from hpu_plugin.gaudi.software import real_gaudi_installed


def start() -> None:
    if runtime.started():
        return
    cfg = config.read()
    if real_gaudi_installed():
        raise EmulationError(
            "HPU_PLUGIN_EMULATE is set but the real Gaudi software (habana_frameworks) is "
            "installed; fix: unset HPU_PLUGIN_EMULATE to use the real stack, or emulate in a "
            "virtual environment without habana-torch-plugin"
        )
    from hpu_emulator import build

    ext = build.load()
    try:
        ext.configure(
            cfg.device_count, cfg.memory, cfg.int64_supported, cfg.fp16_supported,
            cfg.device_name,
        )
    except RuntimeError as exc:
        raise EmulationError(f"the emulator runtime refused its configuration: {exc}") from exc
    ext.route_to_cpu_kernels()
    runtime.set_started(cfg, ext)
    atexit.register(_let_autograd_threads_finish)

    import torch

    from hpu_emulator import hpu

    if getattr(torch, "hpu", None) is not hpu:
        torch._register_device_module("hpu", hpu)
    from hpu_emulator import cuda_build

    cuda_build.install()
    hpu._wrap_torch_manual_seed(runtime.patches)
    from hpu_emulator import lazy

    lazy.start()
    runtime.add_standins()
    _install_hlsmi_shim()
    from hpu_emulator import dynamo

    dynamo.register_lazily()
    from hpu_emulator import counters

    counters.count_kernels()  # before the kernels are registered by habana_ops
    _load_habana_ops()
    from hpu_emulator import gaudi_faults

    gaudi_faults.register()
    from hpu_emulator import aten_numerics

    aten_numerics.register()
    from hpu_emulator import aten_gaps

    aten_gaps.register()
    from hpu_emulator.kernels import quant

    quant.register_when_imported()


def _load_habana_ops() -> None:
    """Habana-specific ops (``torch.ops.hpu.*``) live in an optional sibling module."""
    try:
        import hpu_emulator.habana_ops  # noqa: F401
    except ModuleNotFoundError as exc:
        if exc.name != "hpu_emulator.habana_ops":
            raise


def _let_autograd_threads_finish() -> None:
    """Give autograd's device threads the GIL before the interpreter finalizes.

    A backward on a non-CPU device ends on an engine thread that still holds the graph
    task; torch stashes a Python object in it (``contextvars`` context), and if that thread
    drops it after finalization has begun, taking the GIL kills the thread mid-unwind and
    the process aborts ("terminate called without an active exception"). A short sleep
    with the GIL released lets the thread finish first.
    """
    time.sleep(0.05)


def _install_hlsmi_shim() -> None:
    """An ``hl-smi`` on PATH for this process and its children (see ``fake_hlsmi.install_shim``)."""
    from hpu_emulator.fake_hlsmi import install_shim

    install_shim()
