"""A DDP script written for CUDA and torchrun, as people write them: run unchanged.

``init_process_group("nccl")``, ``torch.cuda.set_device(local_rank)``, ``.cuda()``,
``DistributedDataParallel(device_ids=[local_rank])``, a ``DistributedSampler``, an
``all_reduce`` of the loss, ``barrier``; gloo on the CPU when there is no CUDA. Rank 0
prints one JSON line.
"""

import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

local_rank = int(os.environ["LOCAL_RANK"])
use_cuda = torch.cuda.is_available()
if use_cuda:
    torch.cuda.set_device(local_rank)
dist.init_process_group("nccl" if use_cuda else "gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)

data = torch.randn(128, 16)
target = data @ torch.arange(16, dtype=torch.float32).unsqueeze(1) / 16
loader = DataLoader(TensorDataset(data, target), batch_size=16,
                    sampler=DistributedSampler(TensorDataset(data, target), shuffle=False))
model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
if use_cuda:
    model = DDP(model.cuda(), device_ids=[local_rank], output_device=local_rank)
else:
    model = DDP(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
losses = []
for epoch in range(4):
    loader.sampler.set_epoch(epoch)
    for x, y in loader:
        if use_cuda:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        summed = loss.detach().clone()
        dist.all_reduce(summed)
        losses.append(summed.item() / world)
if use_cuda:
    torch.cuda.synchronize()
dist.barrier(device_ids=[local_rank] if use_cuda else None)
weights = [p.detach().cpu().flatten().tolist() for p in model.module.parameters()]
if rank == 0:
    print(json.dumps({
        "backend": dist.get_backend(), "world": world, "cuda": use_cuda,
        "device": str(next(model.parameters()).device), "losses": losses, "weights": weights,
    }))
dist.destroy_process_group()
