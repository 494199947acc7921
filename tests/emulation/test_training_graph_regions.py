"""Which blocks train through graphs, for models whose repeated blocks are not all alike.

One compiled forward serves every block of a class. Where the blocks of a class differ in
width, stage after stage (a diffusers UNet's ResNet and transformer blocks at each level),
that forward would be compiled again for each width, with dynamic shapes or past Dynamo's
recompile limit: a class whose blocks come in more than two widths runs eagerly. And
stochastic depth (``drop_path_rate``, on by default in Swin) draws random numbers as dropout
does, so it keeps the eager path as dropout does.
"""

from __future__ import annotations

import pytest
from processes import result_of

SCRIPT = r"""
import json, os
import torch
import torch.nn.functional as F
from accelerate import Accelerator
from hpu_emulator import counters

accelerator = Accelerator()
torch.manual_seed(0)
if os.environ["ARM"] == "unet":  # Stable Diffusion 1.5's layout, tiny widths
    from diffusers import UNet2DConditionModel
    model = UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, layers_per_block=2,
        block_out_channels=(16, 32, 64, 64), down_block_types=("CrossAttnDownBlock2D",) * 3
        + ("DownBlock2D",), up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=8)
    def loss_of(model, rng):
        latents = torch.randn(2, 4, 16, 16, generator=rng)
        states = torch.randn(2, 7, 32, generator=rng)
        noise = torch.randn(2, 4, 16, 16, generator=rng)
        steps = torch.randint(0, 1000, (2,), generator=rng)
        to = accelerator.device
        predicted = model(latents.to(to) + noise.to(to), steps.to(to), states.to(to)).sample
        return F.mse_loss(predicted.float(), noise.to(to))
else:  # Swin with its config's stochastic depth (0.1)
    from transformers import SwinConfig, SwinForImageClassification
    model = SwinForImageClassification(SwinConfig(
        image_size=32, patch_size=4, embed_dim=16, depths=[4], num_heads=[2], window_size=4,
        num_labels=3))  # one stage: its four layers are one width
    def loss_of(model, rng):
        pixels = torch.randn(2, 3, 32, 32, generator=rng)
        labels = torch.randint(0, 3, (2,), generator=rng)
        return model(pixel_values=pixels.to(accelerator.device),
                     labels=labels.to(accelerator.device)).loss
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
model, optimizer = accelerator.prepare(model, optimizer)
rng, losses = torch.Generator().manual_seed(1), []
start = counters.snapshot()["compiled_graphs"]
for _ in range(3):
    loss = loss_of(model, rng)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.item())
print("RESULT" + json.dumps({"losses": losses,
                             "graphs": counters.snapshot()["compiled_graphs"] - start}))
"""


def _both(run, arm: str) -> tuple[dict, dict, str]:
    env = {"ARM": arm, "TRANSFORMERS_VERBOSITY": "error"}
    on = run(SCRIPT, env, timeout=600)
    off = run(SCRIPT, {**env, "HPU_PLUGIN_FAST_TRAIN_GRAPHS": "0"}, timeout=600)
    return result_of(on.stdout), result_of(off.stdout), on.stderr


@pytest.mark.e2e
def test_blocks_of_one_class_and_several_shapes_train_eagerly(run):
    on, off, stderr = _both(run, "unet")
    assert "recompile_limit" not in stderr, stderr[-3000:]
    assert on["graphs"] == 0, on  # its ResNet and transformer blocks come in three widths
    assert on["losses"] == pytest.approx(off["losses"], rel=1e-5), (on, off)


@pytest.mark.e2e
def test_stochastic_depth_keeps_the_eager_path(run):
    on, off, _ = _both(run, "swin")
    assert on["graphs"] == off["graphs"] == 0, (on, off)
    assert on["losses"] == off["losses"], (on, off)
