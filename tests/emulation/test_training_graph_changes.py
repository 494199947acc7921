"""A model that changes after it first trained through graphs: what the graphs do then.

- A deep copy of a model that trained (an EMA copy, a reference model), and a model trained
  on the CPU first and then on the Gaudi, train through graphs, with eager mode's losses.
- A LoRA adapter with dropout, added after a first ``Trainer`` run (in place, or by PEFT's
  wrapper, which reports the model as prepared already): the graphs are left, as for a model
  that had the dropout from the start, and the losses are eager mode's; with the per-block
  graphs and with the model's.
- The model moved to the CPU after training on the Gaudi: it trains there as Transformers
  wrote it, with no compiled graph (its blocks, loss and attention masks), and the same loss
  and gradients as a plain copy.
"""

from __future__ import annotations

import pytest
from processes import result_of

SCRIPT = r"""
import copy, json, os
import torch
import transformers as T
from peft import LoraConfig, get_peft_model, inject_adapter_in_model
from hpu_plugin.fast_paths import training_graphs

torch.manual_seed(0)
model = T.LlamaForCausalLM(T.LlamaConfig(
    vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, pad_token_id=0,
    attn_implementation="eager"))  # masks built without an attention mask, by a graph
rng = torch.Generator().manual_seed(1)
data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(1, 128, (8, 16), generator=rng)]

def train(model, **options):
    args = T.TrainingArguments("out", per_device_train_batch_size=4, max_steps=3,
                               logging_steps=1, report_to=[], save_strategy="no", seed=0,
                               **options)
    trainer = T.Trainer(model=model, args=args, train_dataset=data)
    trainer.train()
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]

twin = copy.deepcopy(model)
train(twin, use_cpu=True)
twin.to("hpu")
result = {"cpu_first": train(twin), "cpu_first_graphed": training_graphs.graphed(twin)}
train(model)
result["first"] = training_graphs.graphed(model)
twin = copy.deepcopy(model)  # an EMA copy, a reference model
result["copy"] = train(twin)
result["copy_graphed"] = training_graphs.graphed(twin)

model.cpu()
plain = copy.deepcopy(model)
for part in plain.modules():
    vars(part).pop("forward", None)  # the class's own forward, as before any Gaudi
before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
ids = data[0]["input_ids"][None]
for m in (model, plain):
    m(input_ids=ids, labels=ids).loss.backward()
result["cpu_graphs"] = torch._dynamo.utils.counters["stats"]["unique_graphs"] - before
result["cpu_grads_same"] = all(torch.equal(a.grad, b.grad) for a, b in zip(
    model.parameters(), plain.parameters()))
model.zero_grad()

adapter = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.1, target_modules=["q_proj", "v_proj"])
if os.environ["ADAPTER"] == "wrapped":  # PEFT's wrapper, which says it is prepared
    lora = get_peft_model(model.to("hpu"), adapter)
else:  # added in place: the model the plugin prepared before
    lora = inject_adapter_in_model(adapter, model.to("hpu"))
torch.manual_seed(0)
result["lora"] = train(lora)
result["lora_graphed"] = training_graphs.graphed(lora)
print("RESULT" + json.dumps(result))
"""


@pytest.mark.e2e
@pytest.mark.parametrize("region", ["blocks", "model"])
def test_a_changed_model_leaves_the_graphs_it_no_longer_fits(run, tmp_path, region):
    adapter = {"blocks": "in_place", "model": "wrapped"}[region]

    def result(**env: str) -> dict:
        return result_of(run(f"import os; os.chdir({str(tmp_path)!r})\n" + SCRIPT,
                             {"TRANSFORMERS_VERBOSITY": "error", "ADAPTER": adapter, **env},
                             timeout=600).stdout)

    graphs = result(**({"HPU_PLUGIN_TRAIN_GRAPHS_REGION": "model"} if region == "model" else {}))
    eager = result(HPU_PLUGIN_FAST_TRAIN_GRAPHS="0")
    assert graphs["first"] is True and eager["first"] is False, (graphs, eager)
    # a copy of a trained model, and a model trained on the CPU first, train through graphs
    # (the model's region is a class forward, given only as Accelerate first prepares it)
    for case in ("copy", "cpu_first") if region == "blocks" else ("copy",):
        assert graphs[f"{case}_graphed"] is True, graphs
        assert graphs[case] == pytest.approx(eager[case], rel=1e-5), (case, graphs, eager)
    assert graphs["lora_graphed"] is False, graphs
    # the adapter's dropout draws the random numbers eager mode draws
    assert graphs["lora"] == eager["lora"], (graphs, eager)
    assert graphs["cpu_graphs"] == 0 and graphs["cpu_grads_same"] is True, graphs
