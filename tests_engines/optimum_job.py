"""optimum-habana 1.21.2 as its examples use it, on the emulated Gaudi in lazy mode (its
default): GaudiTrainer with a GaudiConfig of fused AdamW and fused clip-norm (what the
Habana model cards' gaudi_config.json set) trains a tiny GPT-2 built from a config, and
greedy generation with HPU graphs gives the CPU's tokens. Prints RESULT.

Runs in .venv-optimum (requirements/optimum-habana.txt): optimum-habana pins its own, older
Transformers and Accelerate.

One import is stubbed, and only it: ``torchvision`` (``transforms``), which optimum-habana's
GLM-4V tokenizer imports when ``adapt_transformers_to_gaudi`` loads every model it patches;
no torchvision release on this machine's index matches the CPU build of torch 2.13 (pip
would replace torch), and nothing here uses it.
"""
import importlib.machinery
import json
import sys
import types
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

folder = Path(sys.argv[1])
#: "train", "generate" or "cpu-generate": each its own program, as the examples run them
#: (Transformers' own generate and optimum-habana's adapted one do not share a process).
PART = sys.argv[2]
if not (folder / "gpt2").exists():
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=64,
                        bos_token_id=1, eos_token_id=2, pad_token_id=0, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0)  # no dropout: CPU and hpu streams differ
    GPT2LMHeadModel(config).save_pretrained(folder / "gpt2")
prompt = torch.randint(3, 64, (2, 6), generator=torch.Generator().manual_seed(1))


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        ids = torch.randint(3, 64, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def train(on_hpu):
    """Four steps; the CPU reference is Transformers' own Trainer (torch AdamW, clipping)."""
    torch.manual_seed(0)
    # After adapt_transformers_to_gaudi, the Auto class gives optimum-habana's GPT-2.
    model = AutoModelForCausalLM.from_pretrained(folder / "gpt2")
    common = {"max_steps": 4, "per_device_train_batch_size": 4, "learning_rate": 1e-3,
              "report_to": [], "save_strategy": "no", "logging_steps": 1, "seed": 0,
              "max_grad_norm": 1.0}
    if not on_hpu:
        from transformers import Trainer, TrainingArguments

        args = TrainingArguments(output_dir=str(folder / "cpu"), use_cpu=True, **common)
        trainer = Trainer(model=model, args=args, train_dataset=Data())
    else:
        from optimum.habana import GaudiConfig, GaudiTrainer, GaudiTrainingArguments

        gaudi_config = GaudiConfig(use_fused_adam=True, use_fused_clip_norm=True)
        args = GaudiTrainingArguments(output_dir=str(folder / "hpu"), use_habana=True,
                                      use_lazy_mode=True, **common)
        trainer = GaudiTrainer(model=model, gaudi_config=gaudi_config, args=args,
                               train_dataset=Data())
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    optimizer = trainer.optimizer
    while hasattr(optimizer, "optimizer"):
        optimizer = optimizer.optimizer
    return losses, type(optimizer).__module__ + "." + type(optimizer).__name__


class _Absent(types.ModuleType):
    """Any attribute is a placeholder class: module-level ``from x import y`` succeeds."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {})


def adapt():
    for name in ["torchvision", "torchvision.transforms"]:
        sys.modules[name] = _Absent(name)
        sys.modules[name].__spec__ = importlib.machinery.ModuleSpec(name, None)
    from optimum.habana.transformers.modeling_utils import adapt_transformers_to_gaudi

    adapt_transformers_to_gaudi()


def generate():
    """optimum-habana's generate on the HPU-graph-wrapped model, greedy, as its
    text-generation example runs it."""
    adapt()
    import habana_frameworks.torch.hpu as hthpu
    from habana_frameworks.torch.hpu.metrics import metric_global

    model = AutoModelForCausalLM.from_pretrained(folder / "gpt2").eval().to("hpu")
    model = hthpu.wrap_in_hpu_graph(model)
    before = dict(metric_global("graph_compilation").stats())["TotalNumber"]
    hpu = model.generate(prompt.to("hpu"), max_new_tokens=8, min_new_tokens=8,
                         do_sample=False, lazy_mode=True, hpu_graphs=True).cpu().tolist()
    after = dict(metric_global("graph_compilation").stats())["TotalNumber"]
    return {"model": type(model).__name__, "tokens": hpu, "compilations": after - before}


if PART == "train":
    cpu_losses, cpu_optimizer = train(False)
    adapt()
    hpu_losses, hpu_optimizer = train(True)
    got = {"cpu_losses": cpu_losses, "hpu_losses": hpu_losses,
           "optimizers": [cpu_optimizer, hpu_optimizer]}
elif PART == "generate":
    got = generate()
else:  # the reference: Transformers' own greedy generate on the CPU
    got = {"tokens": GPT2LMHeadModel.from_pretrained(folder / "gpt2").generate(
        prompt, max_new_tokens=8, min_new_tokens=8, do_sample=False).tolist()}
print("RESULT", json.dumps(got), flush=True)
