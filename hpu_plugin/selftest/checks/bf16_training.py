"""bf16 training steps on Gaudi: a tiny Llama under bf16 autocast and in pure bf16 learns a
fixed batch (the loss falls) with finite gradients that live on ``hpu``."""

from __future__ import annotations

from typing import Any

from hpu_plugin.selftest import tiny
from hpu_plugin.selftest.harness import acquire, require, run

STEPS = 6


def _train(torch: Any, pure_bf16: bool) -> list[float]:
    model = tiny.model().train().to("hpu")
    if pure_bf16:
        model = model.to(torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = torch.randint(3, len(tiny.WORDS) + 3, (4, 12), generator=torch.Generator().manual_seed(1))
    ids = ids.to("hpu")
    losses = []
    for _ in range(STEPS):
        with torch.autocast("hpu", dtype=torch.bfloat16, enabled=not pure_bf16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        require(grads, "no gradient was computed")
        require(all(g.device.type == "hpu" for g in grads), "a gradient is not on hpu")
        require(
            all(bool(torch.isfinite(g).all()) for g in grads), "a gradient is not finite"
        )
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach().float().cpu()))
    return losses


def body() -> tuple[str, dict[str, Any]]:
    torch = acquire()
    results = {}
    for label, pure in (("autocast", False), ("pure_bf16", True)):
        losses = _train(torch, pure)
        require(all(loss == loss for loss in losses), f"{label}: a loss is NaN: {losses}")
        require(
            losses[-1] < losses[0],
            f"{label}: the loss did not fall in {STEPS} steps on one batch: {losses}",
        )
        results[label] = losses
    auto, pure = results["autocast"], results["pure_bf16"]
    return (
        f"{STEPS} steps each: autocast loss {auto[0]:.2f}->{auto[-1]:.2f}, "
        f"pure bf16 {pure[0]:.2f}->{pure[-1]:.2f}",
        {"losses": results},
    )


if __name__ == "__main__":
    run("bf16-training", body)
