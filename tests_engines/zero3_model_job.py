"""A Transformers model trained by an unchanged ``Trainer``, under ZeRO-3 or DDP.

    torchrun --nproc_per_node 2 zero3_model_job.py MODEL OUT STAGE

With stage 3, ``TrainingArguments(deepspeed=...)`` is made before ``from_pretrained``, as
Transformers documents for models bigger than a card: the weights then load partitioned
(``deepspeed.zero.Init``) and no rank ever holds the whole model. Rank 0 prints the losses,
and every rank what it holds of the model's parameters against their full size.
"""

import json
import os
import sys

import torch
import torch.distributed as dist
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

path, out, stage = sys.argv[1], sys.argv[2], int(sys.argv[3])


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        ids = torch.randint(0, 128, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


ds = None
if stage:
    ds = {"zero_optimization": {"stage": stage}, "train_micro_batch_size_per_gpu": "auto",
          "train_batch_size": "auto", "gradient_accumulation_steps": "auto",
          "gradient_clipping": "auto",
          "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto",
                                                    "betas": "auto", "eps": "auto",
                                                    "torch_adam": True}}}
args = TrainingArguments(output_dir=out, max_steps=4, per_device_train_batch_size=4,
                         learning_rate=1e-3, report_to=[], save_strategy="no", logging_steps=1,
                         deepspeed=ds, seed=0)
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
# What this rank holds: under ZeRO-3 a partition of each parameter (ds_tensor), the whole
# model under DDP.
full = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())
held = sum((p.ds_tensor if hasattr(p, "ds_tensor") else p).numel() for p in model.parameters())
trainer = Trainer(model=model, args=args, train_dataset=Tokens())
trainer.train()
losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
print("RESULT " + json.dumps({"rank": os.environ["RANK"], "stage": stage,
                              "device": args.device.type, "backend": dist.get_backend(),
                              "losses": losses, "held": held, "full": full}), flush=True)
