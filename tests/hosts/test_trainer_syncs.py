"""``device_loss``: a default ``Trainer`` step does not wait for the device.

The ``Trainer``'s NaN/Inf filter of the loss (``logging_nan_inf_filter``, on by default)
reads ``isnan`` and ``isinf`` of every step's loss on the host; a logging step reads the
running loss and the gradient norm. With the fast path the filter's choice is made on the
device and a logging step reads both values in one transfer: a step makes no host sync, a
logging step one, and every logged number is the Trainer's own, a step whose loss is NaN
included (its running average is added in its place, as the Trainer does).
"""

from __future__ import annotations

import json

import pytest
from processes import TRAINING_ROWS, emulated, result_of, run_python

SCRIPT = TRAINING_ROWS + r"""
import json, os
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments
from hpu_emulator import counters

class Syncs(TrainerCallback):
    '''Host syncs from one step's start to the next one's: the step and its logging.'''
    def __init__(self):
        self.syncs, self.start = [], None
    def on_step_begin(self, args, state, control, **kwargs):
        now = counters.snapshot()["syncs"]
        if self.start is not None:
            self.syncs.append(now - self.start)
        self.start = now

class NaNAtThirdStep(Trainer):
    '''A user's Trainer whose third step's loss is NaN (the filter's case).'''
    def training_step(self, model, inputs, *args, **kwargs):
        loss = super().training_step(model, inputs, *args, **kwargs)
        return loss * float("nan") if self.state.global_step == 2 else loss

def llama():
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        pad_token_id=0))

def train(cls=Trainer, **options):
    seen, syncs = Losses(), Syncs()
    logged = []
    class Logs(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            logged.append({k: v for k, v in logs.items() if k in ("loss", "grad_norm")})
    args = TrainingArguments(output_dir="/tmp/hpu-plugin-test-syncs", max_steps=6,
                             per_device_train_batch_size=2, report_to=[], save_strategy="no",
                             disable_tqdm=True, **options)
    trainer = cls(model=llama(), args=args, train_dataset=Rows(), data_collator=collate,
                  callbacks=[seen, syncs, Logs()])
    out = trainer.train()
    return {"logged": logged, "syncs": syncs.syncs, "train_loss": out.training_loss}

result = {
    "default": train(),                                   # logging_steps=500: no step logs
    "logging": train(logging_steps=2),                     # every other step logs
    "nan": train(NaNAtThirdStep, logging_steps=1),
    "nan_accumulated": train(NaNAtThirdStep, logging_steps=2, gradient_accumulation_steps=2),
    "unfiltered": train(NaNAtThirdStep, logging_steps=1, logging_nan_inf_filter=False),
}
print("RESULT" + json.dumps(result))
"""


@pytest.mark.e2e
def test_a_default_trainer_step_reads_nothing_on_the_host_and_logs_the_same_numbers():
    env = emulated(TRANSFORMERS_VERBOSITY="error")
    on = result_of(run_python(SCRIPT, env, timeout=900, check=True).stdout)
    off = result_of(run_python(SCRIPT, {**env, "HPU_PLUGIN_FAST_LOSS": "0"}, timeout=900,
                               check=True).stdout)
    for arm in on:  # every logged loss and gradient norm, and the final average, the same
        same = [json.dumps(r[arm][key]) for key in ("logged", "train_loss") for r in (on, off)]
        assert same[0] == same[1] and same[2] == same[3], (arm, on[arm], off[arm])
    # the NaN step's loss is filtered as the Trainer filters it; without the filter it shows
    def losses(arm: str) -> list[float]:
        return [row["loss"] for row in on[arm]["logged"] if "loss" in row]

    assert len(losses("nan")) == 6 and all(x == x for x in losses("nan")), on["nan"]
    assert any(x != x for x in losses("unfiltered")), on["unfiltered"]
    # no step waits for the device; a logging step once (off: the filter's two reads a step,
    # and the loss and the gradient norm read one by one)
    assert on["default"]["syncs"] == [0] * 5, on["default"]
    assert on["logging"]["syncs"] == [0, 1] * 2 + [0], on["logging"]
    assert min(off["default"]["syncs"]) >= 1, off["default"]
    assert max(off["logging"]["syncs"]) > 1, off["logging"]
