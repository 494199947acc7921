"""Stand-in for ``habana_frameworks.torch.low_overhead_profiler.profiler``: the bridge's
low-overhead host profiler, which writes ``metrics_pid<pid>.json`` and
``events_pid<pid>.json`` of the device's launches. The emulator has no such launches to
trace: each function refuses, naming what to use instead, so code that imports the module
still loads."""

from __future__ import annotations

from typing import NoReturn


def _refuse(name: str) -> NoReturn:
    raise RuntimeError(
        f"habana_frameworks.torch.low_overhead_profiler.profiler.{name}: the low-overhead host "
        "profiler is not emulated (hpu_plugin emulator); use torch.profiler, which records "
        "the emulated device's ops")


def start() -> None:
    _refuse("start")


def stop() -> None:
    _refuse("stop")


def flush() -> None:
    _refuse("flush")
