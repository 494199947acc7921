"""One rank of an ``accelerate launch`` job, DDP or DeepSpeed as the launcher says.

The loop clips gradients to a norm of ``MAX_NORM`` as a training loop would
(``accelerator.clip_grad_norm_``). Under DDP that clips; under DeepSpeed the engine clipped
already in ``accelerator.backward`` (its ``gradient_clipping``, which the test's config sets
to the same norm; DeepSpeed's default is 1.0) and the call only returns the norm. So both
engines run the same optimizer math, and the norms are printed to show clipping engaged."""

import json
import sys

import torch
from accelerate import Accelerator

MAX_NORM = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0

accelerator = Accelerator()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same data whatever the engine: seeded by step and rank."""
    g = torch.Generator().manual_seed(100 * step + accelerator.process_index)
    return torch.randn(4, 8, generator=g), torch.randn(4, 2, generator=g)


data = [batch(step) for step in range(4)]
model, optimizer = accelerator.prepare(model, optimizer)
losses, norms = [], []
for x, y in data:
    x, y = x.to(accelerator.device), y.to(accelerator.device)
    loss = torch.nn.functional.mse_loss(model(x), y)
    accelerator.backward(loss)
    if MAX_NORM > 0:
        norms.append(float(accelerator.clip_grad_norm_(model.parameters(), MAX_NORM)))
    optimizer.step()
    optimizer.zero_grad()
    losses.append(float(accelerator.reduce(loss.detach(), "mean")))
if accelerator.is_main_process:
    print("RESULT " + json.dumps({
        "type": str(accelerator.distributed_type), "backend": accelerator.state.backend,
        "device": accelerator.device.type, "losses": losses, "norms": norms}), flush=True)
