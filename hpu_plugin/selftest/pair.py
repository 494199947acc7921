"""A two-process job on two Gaudi modules, started by a check's process as ``torchrun``
would start it: one worker per module, ``LOCAL_RANK`` choosing each worker's module from the
``HABANA_VISIBLE_MODULES`` pair the runner picked (two modules no other process holds)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

from hpu_plugin.selftest import protocol
from hpu_plugin.selftest.harness import CannotRun, ModuleBusy

WORLD = 2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(path: str, lines: int = 15) -> str:
    with open(path, errors="replace") as handle:
        return "\n".join(handle.read().splitlines()[-lines:])


def launch(module: str, timeout: float) -> list[dict[str, Any]]:
    """Run ``python -m module --worker`` as ranks 0 and 1; their verdicts, in rank order.

    A worker that cannot acquire its module makes the whole job :class:`ModuleBusy`; a
    worker that dies or hangs is a failure naming it, with the end of its output.
    """
    modules = [m for m in os.environ.get("HABANA_VISIBLE_MODULES", "").split(",") if m]
    if len(modules) < WORLD:
        raise CannotRun(f"{len(modules)} free module(s) chosen, {WORLD} needed")
    port = str(_free_port())
    workers = []
    for rank in range(WORLD):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD),
                   LOCAL_WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        out = tempfile.NamedTemporaryFile("w", suffix=f".rank{rank}", delete=False)
        proc = subprocess.Popen([sys.executable, "-m", module, "--worker"], env=env,
                                stdout=out, stderr=subprocess.STDOUT)
        workers.append((proc, out))
    deadline = time.monotonic() + timeout
    verdicts = []
    for rank, (proc, out) in enumerate(workers):
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other, _ in workers:
                other.kill()
            raise AssertionError(
                f"rank {rank} did not finish in {timeout:g} s; its output ends:\n{_tail(out.name)}"
            ) from None
        out.close()
        with open(out.name, errors="replace") as handle:
            verdict = protocol.parse(handle.read())
        print(f"--- rank {rank} (module {modules[rank]}), exit {proc.returncode}")
        print(_tail(out.name))
        os.unlink(out.name)
        if verdict is None:
            raise AssertionError(f"rank {rank} exited {proc.returncode} without a verdict")
        verdicts.append(verdict)
    for verdict in verdicts:
        busy = verdict["details"].get("busy_module")
        if busy is not None:
            raise ModuleBusy(verdict["reason"], busy_module=busy)
    return verdicts


def summary(verdicts: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The job's result from its workers' verdicts: it passes when every worker passed."""
    failed = [f"rank {r}: {v['reason']}" for r, v in enumerate(verdicts) if v["status"] != "pass"]
    # A rank that lost its peer failed because of the other: name the cause first.
    failed.sort(key=lambda text: "peer" in text.lower())
    if failed:
        raise AssertionError("; ".join(failed))
    return verdicts[0]["reason"], {f"rank{r}": v["details"] for r, v in enumerate(verdicts)}
