"""One worker as Ray Train starts it with resources_per_worker={"HPU": 1}: its own module in
HABANA_VISIBLE_MODULES, LOCAL_RANK the node-local rank, hccl through a tcp:// init_method."""

import json
import os
import sys

import torch
import torch.distributed as dist

rank, port = int(sys.argv[1]), sys.argv[2]
dist.init_process_group(backend="hccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                        world_size=2)
x = torch.full((2,), float(rank + 1), device="hpu")
dist.all_reduce(x)
print("RESULT " + json.dumps({"rank": rank, "sum": x.cpu().tolist(),
                              "module": os.environ.get("HLS_MODULE_ID")}), flush=True)
dist.destroy_process_group()
