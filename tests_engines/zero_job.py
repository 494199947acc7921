import json
import sys

import torch
import torch.distributed as dist
from transformers import Trainer, TrainingArguments

STAGE = int(sys.argv[1])
#: "torch": DeepSpeed runs torch's AdamW (``torch_adam``); "default": the optimizer block as
#: users write it, with which DeepSpeed builds its FusedAdam (on HPU:
#: torch.ops.hpu.optimizer_adamw).
OPTIMIZER = sys.argv[3] if len(sys.argv) > 3 else "torch"

class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 32
    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"x": torch.randn(8, generator=g), "labels": torch.randn(2, generator=g)}

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 2)
    def forward(self, x, labels=None):
        out = self.b(torch.relu(self.a(x)))
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}

ds = None
if STAGE:
    params = {"lr": "auto", "weight_decay": "auto", "betas": "auto", "eps": "auto"}
    if OPTIMIZER == "torch":
        params["torch_adam"] = True
    ds = {"zero_optimization": {"stage": STAGE}, "train_micro_batch_size_per_gpu": "auto",
          "train_batch_size": "auto", "gradient_accumulation_steps": "auto",
          "optimizer": {"type": "AdamW", "params": params},
          "zero_allow_untested_optimizer": True}
args = TrainingArguments(output_dir=sys.argv[2], max_steps=4, per_device_train_batch_size=4,
                         learning_rate=1e-2,
                         report_to=[], save_strategy="no", logging_steps=1, deepspeed=ds, seed=0)
torch.manual_seed(0)
trainer = Trainer(model=Net(), args=args, train_dataset=Data())
out = trainer.train()
inner = trainer.optimizer
while hasattr(inner, "optimizer"):  # Accelerate's wrapper, then ZeRO's, around the basic one
    inner = inner.optimizer
if dist.get_rank() == 0:
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    print("RESULT", json.dumps({"stage": STAGE, "device": args.device.type,
                                "backend": dist.get_backend(), "losses": losses,
                                "optimizer": type(inner).__module__ + "." + type(inner).__name__}),
          flush=True)
