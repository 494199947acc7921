"""The examples of the Transformers "Intel Gaudi" page, unchanged, on Gaudi or the emulator.

    HPU_PLUGIN_EMULATE=1 python examples/reference_page.py     # no Gaudi here: emulate one
    python examples/reference_page.py                          # on a Gaudi machine

Nothing here imports hpu_plugin: installing the package is all it takes. The page's hub
model is replaced by a tiny Llama and tokenizer built from a config and saved locally, since
nothing is downloaded. The first emulated run compiles the emulator (about a minute;
``python -m hpu_emulator build`` does it ahead of time).
"""

import subprocess
import tempfile

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from torch.utils.data import Dataset
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
    is_torch_hpu_available,
    pipeline,
)

WORDS = "intel gaudi is a deep learning accelerator that runs pytorch in eager mode".split()


def save_tiny_checkpoint() -> str:
    """Stands in for "Qwen/Qwen3-0.6B": a model and tokenizer a user would have on disk."""
    path = tempfile.mkdtemp(prefix="tiny-llama-")
    vocab = {word: i for i, word in enumerate(["<unk>", "<s>", "</s>", *WORDS])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
        pad_token="</s>", model_input_names=["input_ids", "attention_mask"],
    ).save_pretrained(path)
    config = LlamaConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, vocab_size=len(vocab), bos_token_id=1, eos_token_id=2,
        pad_token_id=2,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(path)
    return path


class Sentences(Dataset):
    def __init__(self, tokenizer: PreTrainedTokenizerFast) -> None:
        self.ids = tokenizer(" ".join(WORDS), return_tensors="pt")["input_ids"][0]

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids, "labels": self.ids}


def main() -> None:
    section = "== {} ==".format

    print(section("Check the device"))
    print("is_torch_hpu_available():", is_torch_hpu_available())
    if not is_torch_hpu_available():
        raise SystemExit("no Gaudi: set HPU_PLUGIN_EMULATE=1 to run on the emulator")
    print(f"{torch.hpu.device_count()} x {torch.hpu.get_device_name()}")
    hl_smi = subprocess.run(["hl-smi", "-Q", "index,module_id", "-f", "csv"],
                            capture_output=True, text=True, check=False)
    print(hl_smi.stdout.strip())

    checkpoint = save_tiny_checkpoint()

    print(section('Run inference: from_pretrained(device_map="hpu") and generate'))
    model = AutoModelForCausalLM.from_pretrained(checkpoint, device_map="hpu")
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    inputs = tokenizer("intel gaudi is", return_tensors="pt").to(model.device)
    output = model.generate(**inputs, max_new_tokens=8, do_sample=False)
    print("model.device:", model.device)
    print(tokenizer.decode(output[0], skip_special_tokens=True))

    print(section("pipeline() with no device"))
    generator = pipeline("text-generation", model=checkpoint)
    print("pipeline device:", generator.device)
    print(generator("intel gaudi", max_new_tokens=4, do_sample=False)[0]["generated_text"])

    print(section("Train with Trainer, bf16"))
    training_args = TrainingArguments(output_dir=tempfile.mkdtemp(), bf16=True, max_steps=5,
                                      per_device_train_batch_size=4, logging_steps=5,
                                      report_to=[], save_strategy="no")
    print("training_args.device:", training_args.device)
    trainer = Trainer(model=AutoModelForCausalLM.from_pretrained(checkpoint),
                      args=training_args, train_dataset=Sentences(tokenizer))
    print("train loss:", round(trainer.train().training_loss, 4))

    print(section("Compile: torch_compile=True"))
    training_args = TrainingArguments(output_dir=tempfile.mkdtemp(), bf16=True,
                                      torch_compile=True, max_steps=3,
                                      per_device_train_batch_size=4, report_to=[],
                                      save_strategy="no")
    print("torch_compile_backend:", training_args.torch_compile_backend)
    trainer = Trainer(model=AutoModelForCausalLM.from_pretrained(checkpoint),
                      args=training_args, train_dataset=Sentences(tokenizer))
    print("compiled train loss:", round(trainer.train().training_loss, 4))
    print(f"peak device memory: {torch.hpu.max_memory_allocated() / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
