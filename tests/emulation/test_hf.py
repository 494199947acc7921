"""Unchanged Hugging Face code on the emulated Gaudi.

The scripts build a tiny Llama from a config (no downloads), never import hpu_plugin and
never patch Transformers or Accelerate: their own HPU branches must find the emulator.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e

TINY_LLAMA = """
import tempfile
import torch
from transformers import LlamaConfig, LlamaForCausalLM

def tiny_llama_path():
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=128, vocab_size=1000)
    path = tempfile.mkdtemp()
    LlamaForCausalLM(config).save_pretrained(path)
    return path
"""


def test_from_pretrained_on_hpu_and_greedy_generate_equals_cpu(run):
    run(TINY_LLAMA + """
from transformers import AutoModelForCausalLM
from transformers.utils import is_torch_hpu_available
assert is_torch_hpu_available()
path = tiny_llama_path()
cpu = AutoModelForCausalLM.from_pretrained(path)
hpu = AutoModelForCausalLM.from_pretrained(path, device_map="hpu")
assert hpu.device.type == "hpu"
assert all(p.device.type == "hpu" for p in hpu.parameters())
ids = torch.randint(0, 1000, (2, 8))
expected = cpu.generate(ids, max_new_tokens=12, do_sample=False)
got = hpu.generate(ids.to("hpu"), max_new_tokens=12, do_sample=False)
assert got.device.type == "hpu"
assert torch.equal(got.cpu(), expected), (got, expected)
""")


def test_trainer_bf16_steps_on_hpu(run):
    out = run(TINY_LLAMA + """
from torch.utils.data import Dataset
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

class Tokens(Dataset):
    def __len__(self):
        return 16
    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, 1000, (16,), generator=g)
        return {"input_ids": ids, "labels": ids}

path = tiny_llama_path()
args = TrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=4,
                         max_steps=4, bf16=True, learning_rate=1e-3, report_to=[],
                         logging_steps=1, save_strategy="steps", save_steps=2)
assert args.device.type == "hpu", args.device
model = AutoModelForCausalLM.from_pretrained(path)
before = [p.detach().clone() for p in model.parameters()]
trainer = Trainer(model=model, args=args, train_dataset=Tokens())
result = trainer.train()
assert all(p.device.type == "hpu" for p in trainer.model.parameters())
assert result.global_step == 4 and torch.isfinite(torch.tensor(result.training_loss))
assert any(not torch.equal(b, p.detach().cpu()) for b, p in zip(before, model.parameters()))
losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
print("losses", losses)
import glob, os
rng = glob.glob(os.path.join(args.output_dir, "checkpoint-2", "rng_state*.pth"))
assert rng, os.listdir(os.path.join(args.output_dir, "checkpoint-2"))
assert "hpu" in torch.load(rng[0], weights_only=False)  # HPU RNG state is checkpointed
""")
    assert "losses [" in out.stdout


def test_torch_compile_hpu_backend_equals_eager(run):
    run(TINY_LLAMA + """
from transformers import AutoModelForCausalLM
path = tiny_llama_path()
model = AutoModelForCausalLM.from_pretrained(path).to("hpu")
ids = torch.randint(0, 1000, (2, 8), device="hpu")
compiled = torch.compile(model, backend="hpu_backend")
with torch.no_grad():
    eager = model(ids).logits
    graph = compiled(ids).logits
assert graph.device.type == "hpu"
torch.testing.assert_close(graph.cpu(), eager.cpu(), rtol=1e-5, atol=1e-5)
# a training step through the compiled module
loss = compiled(ids, labels=ids).loss
loss.backward()
assert all(p.grad is not None and p.grad.device.type == "hpu"
           for p in model.parameters() if p.requires_grad)
""")


def test_a_flash_attention_request_names_the_gaudi_fix(run):
    """CUDA scripts ask for ``attn_implementation="flash_attention_2"``: on Gaudi there is no
    flash-attn package to install, so the error names the attention that runs Gaudi's fused
    kernel; the same script with ``"sdpa"`` loads."""
    run(TINY_LLAMA + """
from transformers import AutoModelForCausalLM
path = tiny_llama_path()
try:
    AutoModelForCausalLM.from_pretrained(path, attn_implementation="flash_attention_2")
except ImportError as exc:
    message, cause = str(exc), str(exc.__cause__)
else:
    raise AssertionError("flash_attention_2 loaded")
assert "attn_implementation='sdpa'" in message and "Gaudi" in message, message
assert "FlashAttention" in cause, cause  # Transformers' own error, kept as the cause
model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa", device_map="hpu")
assert model.config._attn_implementation == "sdpa"
""")
