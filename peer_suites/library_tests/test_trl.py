"""TRL 1.16.0's trainers as its users write them: no device given, so the Trainer picks Gaudi
when one is ready. A tiny Qwen2 built from a config trains a few steps; the loss is finite,
the weights move, and on hpu the first step's loss equals the CPU's (same weights, same
batch). Covers what optimum-habana's TRL support did: SFT (fp32, bf16), DPO and GRPO."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import causal_lm_folder, sentences
from datasets import Dataset


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> str:
    return causal_lm_folder(tmp_path_factory.mktemp("qwen2"))


def _tokenizer(folder: str):
    """The saved word-level tokenizer as itself (AutoTokenizer would take Qwen2's class)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(folder)


def _moved(model: torch.nn.Module, before: list[torch.Tensor]) -> bool:
    after = [p.detach().cpu() for p in model.parameters()]
    return any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


def _first_loss(trainer) -> float:
    return next(entry["loss"] for entry in trainer.state.log_history if "loss" in entry)


def _sft(folder: str, out: str, use_cpu: bool, bf16: bool = False):
    from trl import SFTConfig, SFTTrainer

    data = Dataset.from_dict({"text": sentences(16)})
    args = SFTConfig(
        output_dir=out, max_steps=3, per_device_train_batch_size=4, logging_steps=1,
        report_to=[], save_strategy="no", seed=0, max_length=16, use_cpu=use_cpu, bf16=bf16,
        learning_rate=1e-3, dataloader_pin_memory=False,
    )
    return SFTTrainer(model=folder, args=args, train_dataset=data,
                      processing_class=_tokenizer(folder))


@pytest.mark.parametrize("bf16", [False, True])
def test_sft_trains_on_the_device_with_the_cpu_loss(folder, device, tmp_path, bf16):
    # Transformers refuses bf16 without an accelerator unless told use_cpu (its own rule)
    trainer = _sft(folder, str(tmp_path / "run"), use_cpu=bf16 and device == "cpu", bf16=bf16)
    assert trainer.args.device.type == device
    before = [p.detach().cpu().clone() for p in trainer.model.parameters()]
    result = trainer.train()
    assert math.isfinite(result.training_loss)
    assert next(trainer.model.parameters()).device.type == device
    assert _moved(trainer.model, before)
    reference = _sft(folder, str(tmp_path / "cpu"), use_cpu=True, bf16=bf16)
    reference.train()
    tolerance = 2e-2 if bf16 else 1e-4
    assert abs(_first_loss(trainer) - _first_loss(reference)) < tolerance


def test_dpo_trains_on_the_device(folder, device, tmp_path):
    from trl import DPOConfig, DPOTrainer

    prompts = sentences(8)
    data = Dataset.from_dict({
        "prompt": prompts, "chosen": [" w1 w2"] * 8, "rejected": [" w3 w4 w5"] * 8,
    })
    args = DPOConfig(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, logging_steps=1,
        report_to=[], save_strategy="no", seed=0, max_length=24, learning_rate=1e-3,
        dataloader_pin_memory=False,
    )
    trainer = DPOTrainer(model=folder, args=args, train_dataset=data,
                         processing_class=_tokenizer(folder))
    assert trainer.args.device.type == device
    before = [p.detach().cpu().clone() for p in trainer.model.parameters()]
    result = trainer.train()
    assert math.isfinite(result.training_loss)
    assert _moved(trainer.model, before)


@pytest.mark.full
def test_grpo_trains_on_the_device(folder, device, tmp_path):
    from trl import GRPOConfig, GRPOTrainer

    def shorter_is_better(completions, **kwargs):
        return [-float(len(c)) for c in completions]

    data = Dataset.from_dict({"prompt": sentences(8)})
    args = GRPOConfig(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, num_generations=2,
        max_completion_length=4, logging_steps=1, report_to=[], save_strategy="no", seed=0,
        learning_rate=1e-3, dataloader_pin_memory=False,
    )
    trainer = GRPOTrainer(model=folder, reward_funcs=shorter_is_better, args=args,
                          train_dataset=data, processing_class=_tokenizer(folder))
    assert trainer.args.device.type == device
    result = trainer.train()
    assert math.isfinite(result.training_loss)
