"""``device_masks``: a forward with a padding mask on ``hpu`` does not wait for the device.

Transformers reads the padding mask on the host to see whether it may skip building the
attention mask (once per forward, twice with padding). With the fast path on, a ``Trainer``
step with default arguments and a padded batch makes two host synchronisations fewer, and
``generate()``'s eager prefill one fewer, with the same losses and tokens; the two more the
``Trainer``'s NaN/Inf filter of the loss reads (``logging_nan_inf_filter``, on by default,
reads ``isnan`` and ``isinf`` of each step's loss) are ``device_loss``'s to save: with both
on a step reads nothing (``tests/hosts/test_trainer_syncs.py``).
"""

from __future__ import annotations

import pytest
from processes import TRAINING_ROWS, emulated, result_of, run_python

SCRIPT = TRAINING_ROWS + r"""
import json, os
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments
from hpu_emulator import counters

class Syncs(TrainerCallback):
    def __init__(self):
        self.syncs = []
    def on_step_begin(self, args, state, control, **kwargs):
        self.start = counters.snapshot()["syncs"]
    def on_step_end(self, args, state, control, **kwargs):
        self.syncs.append(counters.snapshot()["syncs"] - self.start)

def llama():
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        pad_token_id=0))

result = {}
for arm, switch in (("off", "0"), ("on", "1")):
    os.environ["HPU_PLUGIN_FAST_MASKS"] = switch
    seen, syncs = Losses(), Syncs()
    args = TrainingArguments(output_dir="/tmp/hpu-plugin-test-masks", max_steps=4,
                             per_device_train_batch_size=2, report_to=[], save_strategy="no",
                             logging_steps=1, disable_tqdm=True)
    trainer = Trainer(model=llama(), args=args, train_dataset=Rows(), data_collator=collate,
                      callbacks=[seen, syncs])
    trainer.train()
    model = trainer.model.eval()
    ids = torch.tensor([[0, 0, 5, 9, 14, 27], [4, 8, 15, 16, 23, 42]]).to("hpu")
    mask = (ids != 0).long()
    with torch.no_grad():
        counters.reset()
        model(input_ids=ids, attention_mask=mask)
        forward = counters.snapshot()["syncs"]
        tokens = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4,
                                min_new_tokens=4, do_sample=False)
    result[arm] = {"losses": seen.losses, "syncs": syncs.syncs, "forward": forward,
                   "tokens": tokens.cpu().tolist()}
print("RESULT" + json.dumps(result))
"""


@pytest.mark.e2e
def test_a_padded_step_and_forward_make_no_host_sync_for_the_mask():
    # the model trained op by op: in the training graphs Transformers reads no mask anyway
    env = emulated(TRANSFORMERS_VERBOSITY="error", HPU_PLUGIN_FAST_TRAIN_GRAPHS="0")
    done = run_python(SCRIPT, env, timeout=600, check=True)
    result = result_of(done.stdout)
    off, on = result["off"], result["on"]
    assert on["losses"] == off["losses"] and on["tokens"] == off["tokens"], result
    # a padded batch: Transformers reads its mask once or twice a step (twice since
    # masking_utils); with device_loss the loss filter reads nothing either
    assert on["syncs"] == [0] * 4, result
    assert all(o > n for o, n in zip(off["syncs"], on["syncs"], strict=True)), result
    assert off["forward"] >= 1 and on["forward"] == 0, result
