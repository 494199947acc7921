"""A training pass through graphs builds no cache that nobody asked for.

A causal LM's config says ``use_cache=True``, and so does the language model's config inside
LLaVA, which the ``Trainer`` does not turn off (it sets the outer config only). Such a model
builds a cache even while it trains, each layer writes it by its index, and one compiled
forward shared by every layer would be compiled again for each layer. The graphs compiled
must not grow with the depth, and the losses stay those of the eager path.
"""

from __future__ import annotations

import pytest
from processes import result_of

SCRIPT = r"""
import json, os
import torch
import transformers as T
torch.manual_seed(0)
layers = int(os.environ["LAYERS"])
text = T.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                     num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2)
rng = torch.Generator().manual_seed(1)
if os.environ["ARM"] == "llama":  # a plain Accelerate loop, the config as it comes
    from accelerate import Accelerator
    accelerator = Accelerator()
    model = T.LlamaForCausalLM(text)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    losses = []
    for _ in range(3):
        ids = torch.randint(1, 128, (2, 16), generator=rng).to(accelerator.device)
        loss = model(input_ids=ids, labels=ids).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
else:  # LLaVA fine-tuned by a Trainer
    vision = T.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                num_attention_heads=4, image_size=28, patch_size=14)
    model = T.LlavaForConditionalGeneration(T.LlavaConfig(
        text_config=text, vision_config=vision, image_token_index=100))
    ids = [1, 100, 100, 100, 100, 5, 6, 7, 8, 9]
    data = [{"input_ids": torch.tensor(ids), "labels": torch.tensor([-100] * 5 + ids[5:]),
             "pixel_values": torch.randn(3, 28, 28, generator=rng)} for _ in range(6)]
    args = T.TrainingArguments("out", per_device_train_batch_size=2, max_steps=3,
                               logging_steps=1, report_to=[], save_strategy="no")
    trainer = T.Trainer(model=model, args=args, train_dataset=data)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
unique = torch._dynamo.utils.counters["stats"]["unique_graphs"]
print("RESULT" + json.dumps({"losses": losses, "graphs": unique}))
"""


@pytest.mark.e2e
@pytest.mark.parametrize("arm", ["llama", "llava"])
def test_training_graphs_do_not_grow_with_the_depth(run, arm, tmp_path):
    def result(layers: int, **env: str) -> dict:
        extra = {"ARM": arm, "LAYERS": str(layers), "TRANSFORMERS_VERBOSITY": "error", **env}
        return result_of(run(f"import os; os.chdir({str(tmp_path)!r})\n" + SCRIPT, extra,
                             timeout=600).stdout)

    shallow, deep = result(2), result(4)
    eager = result(4, HPU_PLUGIN_FAST_TRAIN_GRAPHS="0")
    assert shallow["graphs"] > 0, shallow
    assert deep["graphs"] == shallow["graphs"], (shallow, deep)
    assert eager["graphs"] == 0, eager
    assert deep["losses"] == pytest.approx(eager["losses"], rel=1e-5), (deep, eager)
