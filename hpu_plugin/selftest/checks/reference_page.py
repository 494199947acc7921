"""The examples of the Transformers "Intel Gaudi" page, unchanged except for the model (a tiny
local one): ``from_pretrained(device_map="hpu")`` and ``generate``, ``pipeline()`` with no
device, ``Trainer`` with bf16, and ``TrainingArguments(torch_compile=True)``'s backend."""

from __future__ import annotations

import tempfile
from typing import Any

from hpu_plugin.selftest import tiny
from hpu_plugin.selftest.harness import acquire, require, run


def _inference(path: str) -> int:
    from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

    model = AutoModelForCausalLM.from_pretrained(path, device_map="hpu")
    require(model.device.type == "hpu", f'device_map="hpu" put the model on {model.device}')
    tokenizer = AutoTokenizer.from_pretrained(path)
    inputs = tokenizer("intel gaudi is", return_tensors="pt").to(model.device)
    output = model.generate(**inputs, max_new_tokens=6, do_sample=False)
    new = output.shape[-1] - inputs["input_ids"].shape[-1]
    require(new > 0, "generate() produced no token")
    generator = pipeline("text-generation", model=path)
    require(
        generator.device.type == "hpu", f"pipeline() with no device chose {generator.device}"
    )
    text = generator("intel gaudi", max_new_tokens=3, do_sample=False)[0]["generated_text"]
    require(text.startswith("intel gaudi"), f"pipeline() returned {text!r}")
    return int(new)


def _training(path: str) -> float:
    import torch
    from torch.utils.data import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

    ids = AutoTokenizer.from_pretrained(path)(" ".join(tiny.WORDS), return_tensors="pt")
    row = ids["input_ids"][0]

    class Sentences(Dataset):
        def __len__(self) -> int:
            return 8

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            return {"input_ids": row, "labels": row}

    args = TrainingArguments(
        output_dir=tempfile.mkdtemp(), bf16=True, max_steps=2, per_device_train_batch_size=4,
        report_to=[], save_strategy="no", logging_steps=1,
    )
    require(args.device.type == "hpu", f"TrainingArguments().device is {args.device}")
    trainer = Trainer(
        model=AutoModelForCausalLM.from_pretrained(path), args=args, train_dataset=Sentences()
    )
    loss = trainer.train().training_loss
    require(loss == loss and loss > 0, f"Trainer's training loss is {loss}")
    require(
        next(trainer.model.parameters()).device.type == "hpu", "Trainer did not train on hpu"
    )
    compiled = TrainingArguments(
        output_dir=tempfile.mkdtemp(), torch_compile=True, report_to=[], save_strategy="no"
    )
    require(
        compiled.torch_compile_backend == "hpu_backend",
        f"TrainingArguments(torch_compile=True).torch_compile_backend is "
        f"{compiled.torch_compile_backend!r}, not 'hpu_backend'",
    )
    return float(loss)


def body() -> tuple[str, dict[str, Any]]:
    acquire()
    path = tiny.checkpoint()
    new_tokens = _inference(path)
    loss = _training(path)
    return (
        f"generate, pipeline, Trainer bf16 (loss {loss:.3f}) and torch_compile on hpu",
        {"new_tokens": new_tokens, "train_loss": loss},
    )


if __name__ == "__main__":
    run("reference-page", body)
