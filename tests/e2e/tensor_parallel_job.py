"""A user's tensor- and expert-parallel job, as written for any accelerator (run by the tests
of tests/e2e/test_tensor_parallel.py and tests_engines/test_tensor_parallel.py).

    python tensor_parallel_job.py DIR make-llama|make-mixtral   # a tiny model from a config
    python tensor_parallel_job.py DIR single                    # one device, no launcher
    torchrun --nproc_per_node N tensor_parallel_job.py DIR API  # N cards, API below
    accelerate launch --use_parallelism_config ... tensor_parallel_job.py DIR accelerate_launch

Prints ``RESULT {json}``: greedy tokens, three AdamW steps' losses, how much of one projection
(or of the experts) the rank holds, the collectives the rank issued while generating, by op
name, and the Gaudi optimizer kernels each step ran.
"""

import json
import os
import sys
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import AutoModelForCausalLM, DistributedConfig

path, api = sys.argv[1], sys.argv[2]

if api.startswith("make-"):
    torch.manual_seed(0)
    shape = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 2, "max_position_embeddings": 128}
    if api == "make-llama":  # 8 heads: whole heads on each of up to 8 cards
        from transformers import LlamaConfig, LlamaForCausalLM

        LlamaForCausalLM(LlamaConfig(**shape, num_attention_heads=8,
                                     num_key_value_heads=8)).save_pretrained(path)
    else:  # 4 experts, 2 a token: expert parallelism gives each of 2 or 4 cards its share
        from transformers import MixtralConfig, MixtralForCausalLM

        MixtralForCausalLM(MixtralConfig(**shape, num_attention_heads=4, num_key_value_heads=4,
                                         num_local_experts=4,
                                         num_experts_per_tok=2)).save_pretrained(path)
    sys.exit(0)


class Collectives(TorchDispatchMode):
    """Counts the collectives below torch's dispatcher: functional ones (DTensor's) and c10d's
    own (``torch.distributed.all_reduce``, which Transformers' row-wise layers call)."""

    def __init__(self) -> None:
        super().__init__()
        self.count: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if func.namespace in ("_c10d_functional", "c10d") and not name.startswith(("wait", "_")):
            self.count[name] += 1
        return func(*args, **(kwargs or {}))


class GaudiOptimizerKernels(TorchDispatchMode):
    """Counts Gaudi's fused optimizer kernels (``hpu::optimizer_adamw``...) a step runs."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += func.namespace == "hpu" and func.__name__.startswith("optimizer_")
        return func(*args, **(kwargs or {}))


world = int(os.environ.get("WORLD_SIZE", "1"))
if api == "tp_plan":
    model = AutoModelForCausalLM.from_pretrained(path, tp_plan="auto")
elif api == "config":
    model = AutoModelForCausalLM.from_pretrained(
        path, distributed_config=DistributedConfig(tp_size=world, tp_plan="auto"))
elif api == "mesh":  # the user's own mesh: torch's DeviceMesh binds device LOCAL_RANK itself
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("hpu", (world,), mesh_dim_names=("tp",))
    model = AutoModelForCausalLM.from_pretrained(path, tp_plan="auto", device_mesh=mesh)
elif api == "accelerate":
    from accelerate import Accelerator
    from accelerate.parallelism_config import ParallelismConfig

    accelerator = Accelerator(parallelism_config=ParallelismConfig(tp_size=world))
    model = AutoModelForCausalLM.from_pretrained(
        path, tp_plan="auto", device_mesh=accelerator.torch_device_mesh["tp"])
elif api == "accelerate_launch":  # sizes from accelerate launch --parallelism_config_*
    from accelerate import Accelerator

    accelerator = Accelerator()
    if accelerator.parallelism_config.tp_enabled:
        model = AutoModelForCausalLM.from_pretrained(
            path, tp_plan="auto", device_mesh=accelerator.torch_device_mesh)
    else:  # fully sharded by Accelerate's prepare (FSDP 2 over dp_shard)
        model = AutoModelForCausalLM.from_pretrained(path).to(accelerator.device)
elif api == "2d":  # tensor parallel inside pairs of cards, fully sharded across the pairs
    model = AutoModelForCausalLM.from_pretrained(path, distributed_config=DistributedConfig(
        tp_size=2, fsdp_size=world // 2, tp_plan="auto"))
elif api == "ep":  # dense layers tensor parallel, experts split between the cards
    model = AutoModelForCausalLM.from_pretrained(
        path, distributed_config=DistributedConfig(tp_size=world, ep_size=world))
elif api == "ep_all_to_all":  # the same, tokens sent to their experts' card by all-to-all
    model = AutoModelForCausalLM.from_pretrained(path, distributed_config=DistributedConfig(
        tp_size=world, ep_size=world, ep_implementation="all_to_all"))
else:
    model = AutoModelForCausalLM.from_pretrained(path).to("hpu")

ids = torch.tensor([[1, 5, 9, 3], [7, 2, 8, 4]], device=model.device)
counted = Collectives()
# Not under FSDP 2: a forward outside training leaves an unshard FSDP waits for at the end of
# the next backward on torch.accelerator's stream with the hpu stream's event, which torch
# reads as a torch.Event (docs/scaling-out.md).
with counted:
    tokens = (None if api == "2d" else
              model.generate(ids, max_new_tokens=6, do_sample=False).tolist())
layer = model.model.layers[0]
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
backward = lambda loss: loss.backward()  # noqa: E731
if api.startswith("accelerate"):  # the fused optimizer of Accelerate's prepare, as a Trainer has
    model, optimizer = accelerator.prepare(model, optimizer)
    backward = accelerator.backward
g = torch.Generator().manual_seed(0)
losses, kernels = [], []
for _ in range(3):
    batch = torch.randint(0, 128, (2, 16), generator=g).to(model.device)
    loss = model(input_ids=batch, labels=batch).loss
    backward(loss)
    with GaudiOptimizerKernels() as stepped:
        optimizer.step()
    kernels.append(stepped.count)
    optimizer.zero_grad()
    losses.append(loss.item())
# What the rank holds of one projection (or of the experts), once Accelerate's prepare has
# sharded what it shards.
weight = (layer.mlp.experts.gate_up_proj if hasattr(layer.mlp, "experts")
          else layer.self_attn.q_proj.weight)
held = (weight.to_local() if hasattr(weight, "to_local") else weight).numel()
print("RESULT " + json.dumps({"rank": os.environ.get("RANK", "single"), "device": str(model.device),
      "tokens": tokens, "losses": losses, "held": held, "collectives": dict(counted.count),
      "optimizer_kernels": kernels}),
      flush=True)
