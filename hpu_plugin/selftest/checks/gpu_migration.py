"""GPU Migration Toolkit: a short training step written for CUDA runs on Gaudi and agrees
with the CPU, and the plugin's DDP decision agrees with the toolkit (``nccl`` runs as
``hccl``). Runs when ``PT_HPU_GPU_MIGRATION`` is on; otherwise there is nothing to check."""

from __future__ import annotations

import os
from typing import Any

from hpu_plugin.selftest.harness import CannotRun, acquire, require, run

#: A bf16-autocast step on hpu against the float32 step on the CPU: relative L2 error of the
#: updated weights (bf16 rounds to 8 bits of mantissa, 3.9e-3 per rounding, through one step).
TOLERANCE = 3e-2


def _step(torch: Any, device: str) -> Any:
    """What a CUDA user writes: ``.cuda()``-style placement, autocast, a grad scaler."""
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 8).to(device)
    data, target = torch.randn(16, 32).to(device), torch.randn(16, 8).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = torch.nn.functional.mse_loss(model(data).float(), target)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return model.weight.detach().float().cpu()


def body() -> tuple[str, dict[str, Any]]:
    from hpu_plugin.gaudi import migration

    if not migration.requested(os.environ):
        raise CannotRun(f"{migration.VARIABLE} is off: the GPU Migration Toolkit is not in use")
    torch = acquire()
    from hpu_plugin.registry import get_registry

    require(migration.loaded(), f"{migration.VARIABLE} is on but {migration.MODULE} did not load")
    require(torch.cuda.is_available(), "torch.cuda.is_available() is False under the toolkit")
    placed = torch.zeros(2, device="cuda").device.type
    require(placed == "hpu", f"torch.zeros(device='cuda') landed on {placed!r}, not hpu")
    got = _step(torch, "cuda")
    torch.cuda.synchronize()
    allocated = torch.cuda.memory_allocated()
    want = _step(torch, "cpu")
    error = float((got - want).norm() / want.norm())
    require(error <= TOLERANCE,
            f"the CUDA-written step differs from the CPU by {error:.3g} (> {TOLERANCE})")
    backend = get_registry().ddp_backend("nccl")
    require(backend == "hccl", f"the plugin answers {backend!r} for nccl under the toolkit")
    details = {"relative_error": error, "memory_allocated": allocated, "nccl_runs_as": backend,
               "device_count": torch.cuda.device_count()}
    return f"a CUDA-written bf16 autocast step on hpu, error {error:.2g} vs CPU", details


if __name__ == "__main__":
    run("gpu-migration", body)
