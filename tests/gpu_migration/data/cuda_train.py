"""A training script written for CUDA, as people write them: run unchanged by the tests.

Mixed precision with ``torch.cuda.amp`` (autocast and a grad scaler), ``.cuda()``,
``torch.cuda.synchronize`` and the memory calls; the CPU when there is no CUDA. Prints one
JSON line with the losses, a checksum of the weights and what CUDA said.
"""

import json
import time

import torch
import torch.nn as nn

use_cuda = torch.cuda.is_available()
device = torch.device("cuda" if use_cuda else "cpu")
torch.manual_seed(0)
if use_cuda:
    torch.cuda.manual_seed_all(0)
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 4))

    def forward(self, x):
        return self.body(x)


data = torch.randn(256, 32)
labels = (data[:, :4].sum(dim=1) > 0).long() + 2 * (data[:, 4:8].sum(dim=1) > 0).long()
model = Net()
if use_cuda:
    model = model.cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
scaler = torch.cuda.amp.GradScaler(enabled=use_cuda)
losses = []
start = time.time()
for _epoch in range(3):
    for i in range(0, 256, 32):
        x = data[i:i + 32].to(device, non_blocking=True)
        y = labels[i:i + 32].cuda() if use_cuda else labels[i:i + 32]
        optimizer.zero_grad(set_to_none=True)
        with torch.cuda.amp.autocast(enabled=use_cuda):
            loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
if use_cuda:
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    torch.cuda.empty_cache()
    name = torch.cuda.get_device_name(0)
else:
    peak, name = 0, "cpu"
with torch.no_grad():
    accuracy = (model(data.to(device)).argmax(dim=1).cpu() == labels).float().mean().item()
print(json.dumps({
    "device": str(next(model.parameters()).device), "cuda": use_cuda, "name": name,
    "losses": losses, "accuracy": accuracy, "peak_memory": peak,
    "weight_sum": sum(p.detach().float().sum().item() for p in model.parameters()),
    "seconds": time.time() - start,
}))
