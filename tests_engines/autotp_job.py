"""``deepspeed.init_inference`` with automatic tensor parallelism, as optimum-habana's
text-generation example ran big models on Gaudi: a tiny Llama saved in argv[1], greedy
tokens on each rank, and the shapes of the layers AutoTP split. Without WORLD_SIZE, the
same model on one device."""

import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32)
if "WORLD_SIZE" in os.environ:
    import deepspeed

    engine = deepspeed.init_inference(
        model, tensor_parallel={"tp_size": int(os.environ["WORLD_SIZE"])},
        dtype=torch.float32, replace_with_kernel_inject=False)
    model = engine.module
else:
    model = model.to("hpu")
ids = torch.tensor([[1, 5, 9, 3], [7, 2, 8, 4]], device="hpu")
tokens = model.generate(ids, max_new_tokens=6, do_sample=False).tolist()
layer = model.model.layers[0]
print("RESULT " + json.dumps({
    "rank": os.environ.get("RANK", "single"), "tokens": tokens,
    "q_proj": list(layer.self_attn.q_proj.weight.shape),
    "down_proj": list(layer.mlp.down_proj.weight.shape)}), flush=True)
