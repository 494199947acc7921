import json
import sys

import torch
import torch.distributed as dist
from transformers import Trainer, TrainingArguments

STAGE = int(sys.argv[1])

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
    ds = {"zero_optimization": {"stage": STAGE}, "train_micro_batch_size_per_gpu": "auto",
          "train_batch_size": "auto", "gradient_accumulation_steps": "auto",
          "optimizer": {"type": "AdamW", "params": {
              "lr": "auto", "weight_decay": "auto", "betas": "auto", "eps": "auto",
              "torch_adam": True}},
          "zero_allow_untested_optimizer": True}
args = TrainingArguments(output_dir=sys.argv[2], max_steps=4, per_device_train_batch_size=4,
                         learning_rate=1e-2,
                         report_to=[], save_strategy="no", logging_steps=1, deepspeed=ds, seed=0)
torch.manual_seed(0)
trainer = Trainer(model=Net(), args=args, train_dataset=Data())
out = trainer.train()
if dist.get_rank() == 0:
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    print("RESULT", json.dumps({"stage": STAGE, "device": args.device.type,
                                "backend": dist.get_backend(), "losses": losses}), flush=True)
