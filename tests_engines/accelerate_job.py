"""One rank of an ``accelerate launch`` job, DDP or DeepSpeed as the launcher says."""

import json

import torch
from accelerate import Accelerator

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
losses = []
for x, y in data:
    x, y = x.to(accelerator.device), y.to(accelerator.device)
    loss = torch.nn.functional.mse_loss(model(x), y)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    losses.append(float(accelerator.reduce(loss.detach(), "mean")))
if accelerator.is_main_process:
    print("RESULT " + json.dumps({
        "type": str(accelerator.distributed_type), "backend": accelerator.state.backend,
        "device": accelerator.device.type, "losses": losses}), flush=True)
