"""A model whose attention mask learns: Swin adds its relative position bias (a parameter) to
the mask it gives attention, as BEiT does. Gaudi's fused attention kernel gives no gradient
for the mask (the bridge's ``FusedSDPA`` backward returns none for it), so with a mask that
needs one the fused path stays out and Transformers' SDPA runs: the bias trains as on the
CPU. Without gradients (evaluation, inference) the mask learns nothing and the kernel runs.
"""

from __future__ import annotations

import pytest
from processes import result_of

SCRIPT = r"""
import json
import torch
from transformers import SwinConfig, SwinForImageClassification
from hpu_emulator import counters

def swin(device):
    torch.manual_seed(0)
    model = SwinForImageClassification(SwinConfig(
        image_size=32, patch_size=4, embed_dim=16, depths=[2, 2], num_heads=[2, 4],
        window_size=4, num_labels=3, drop_path_rate=0.0))
    return model.to(device)

def gradients(device):
    model = swin(device)
    torch.manual_seed(1)
    pixels, labels = torch.randn(2, 3, 32, 32), torch.tensor([0, 2])
    model(pixel_values=pixels.to(device), labels=labels.to(device)).loss.backward()
    tables = [block.attention.relative_position_bias.relative_position_bias_table
              for layer in model.swin.encoder.layers for block in layer.blocks]
    return [None if t.grad is None else t.grad.abs().sum().item() for t in tables]

def fused_in_inference():
    model = swin("hpu").eval()
    start = counters.snapshot()["fused_kernels"]
    with torch.no_grad():
        model(pixel_values=torch.randn(2, 3, 32, 32).to("hpu"))
    return counters.snapshot()["fused_kernels"] - start

print("RESULT" + json.dumps({"cpu": gradients("cpu"), "hpu": gradients("hpu"),
                             "fused": fused_in_inference()}))
"""


@pytest.mark.e2e
def test_a_learned_attention_bias_trains_as_on_the_cpu(run):
    got = result_of(run(SCRIPT, {"TRANSFORMERS_VERBOSITY": "error"}, timeout=600).stdout)
    assert len(got["cpu"]) == 4 and all(g is not None and g > 0 for g in got["cpu"]), got
    assert all(h is not None and abs(h - c) <= 1e-5 * c for h, c in
               zip(got["hpu"], got["cpu"], strict=True)), got
    assert got["fused"] > 0, got
