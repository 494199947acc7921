"""One rank of a two-node Accelerate job; prints what it ran on after training."""

import json
import os

import torch
from accelerate import Accelerator

accelerator = Accelerator()
torch.manual_seed(0)
model = torch.nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
torch.manual_seed(100 + accelerator.process_index)  # different data on each rank
for _ in range(3):
    loss = model(torch.randn(4, 8, device=accelerator.device)).pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
accelerator.wait_for_everyone()
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()
print("RESULT " + json.dumps({
    "rank": accelerator.process_index, "n": accelerator.num_processes,
    "node": os.environ.get("GROUP_RANK") or os.environ.get("CROSS_RANK"),  # DeepSpeed's
    "backend": accelerator.state.backend,
    "type": str(accelerator.distributed_type),
    "device": accelerator.device.type, "module": os.environ.get("HLS_MODULE_ID"),
    "checksum": round(float(flat.sum()), 6),
}), flush=True)
