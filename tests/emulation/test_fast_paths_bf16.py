"""Gaudi's fused attention and rotary kernels under bf16 autocast, as everyone trains on
Gaudi (``TrainingArguments(bf16=True)``): taken as in float32, with the ordinary path's
losses and logits within bf16's tolerance.

Under autocast torch's SDPA runs in bf16 (it is on the bridge's lower-precision list,
``hpu_ops/autocast_helpers.h``), so the fused attention is given bf16 inputs as SDPA would
be; the rotary kernel computes in float32 when its tables are (the bridge's helper matches
the dtypes), as it does for optimum-habana's models. The tolerance, 1e-2 absolute and
relative, is what Transformers' own tests allow bf16 SDPA against eager attention
(``tests/test_modeling_common.py``, ``_test_eager_matches_sdpa_inference``).
"""

from __future__ import annotations

import pytest
from processes import TRAINING_ROWS, result_of

SCRIPT = TRAINING_ROWS + r"""
import json, os
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments
from hpu_emulator import counters

class Steps(TrainerCallback):
    def __init__(self):
        self.kernels, self.launches = [], []
    def on_step_begin(self, args, state, control, **kwargs):
        self.start = counters.snapshot()
    def on_step_end(self, args, state, control, **kwargs):
        end = counters.snapshot()
        self.kernels.append(end["fused_kernels"] - self.start["fused_kernels"])
        self.launches.append(end["launches"] - self.start["launches"])

def llama():
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        pad_token_id=0))

def train(bf16):
    seen, steps = Losses(), Steps()
    args = TrainingArguments(output_dir="/tmp/hpu-plugin-test-bf16", max_steps=6,
                             per_device_train_batch_size=2, learning_rate=1e-3, bf16=bf16,
                             report_to=[], save_strategy="no", logging_steps=1, seed=0,
                             disable_tqdm=True)
    trainer = Trainer(model=llama(), args=args, train_dataset=Rows(), data_collator=collate,
                      callbacks=[seen, steps])
    trainer.train()
    model = trainer.model.eval()
    ids = torch.tensor([[0, 0, 5, 9, 14, 27], [4, 8, 15, 16, 23, 42]]).to("hpu")
    with torch.no_grad(), torch.autocast("hpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(input_ids=ids, attention_mask=(ids != 0).long()).logits.float()
    return {"losses": seen.losses, "kernels": steps.kernels[1:], "launches": steps.launches[1:],
            "logits": logits.cpu().flatten().tolist()}

result = {}
for arm, switch, bf16 in (("off", "0", True), ("on", "1", True), ("fp32", "1", False)):
    os.environ["HPU_PLUGIN_FAST"] = switch
    result[arm] = train(bf16)
print("RESULT" + json.dumps(result))
"""


@pytest.mark.e2e
def test_bf16_training_takes_the_fused_attention_and_rotary_kernels(run):
    result = result_of(run(SCRIPT, {"TRANSFORMERS_VERBOSITY": "error"}, timeout=600).stdout)
    off, on, fp32 = result["off"], result["on"], result["fp32"]
    # every kernel float32 training takes, bf16 takes too (attention, rotary, norms, optimizer)
    assert on["kernels"] == fp32["kernels"] and min(on["kernels"]) > 0, (on, fp32)
    assert off["kernels"] == [0] * len(off["kernels"])
    assert max(on["launches"]) < min(off["launches"]), (on["launches"], off["launches"])
    assert len(on["losses"]) == len(off["losses"]) == 6
    for got, want in zip(on["losses"], off["losses"], strict=True):
        assert abs(got - want) <= 1e-2 + 1e-2 * abs(want), (on["losses"], off["losses"])
    for got, want in zip(on["logits"], off["logits"], strict=True):
        assert abs(got - want) <= 1e-2 + 1e-2 * abs(want)
