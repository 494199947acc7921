"""diffusers 0.42.1 as its users write it on Gaudi: build a pipeline, ``.to("hpu")``, call it.
Tiny models from a config; the same seeded CPU generator on each run, so on hpu the images
equal the CPU's. Covers what optimum-habana's diffusers support did for DDPM and DDIM
sampling and a UNet2DCondition (Stable Diffusion's) denoising step."""

from __future__ import annotations

import pytest
import torch
from diffusers import DDIMPipeline, DDIMScheduler, DDPMPipeline, DDPMScheduler, UNet2DModel


def _unet() -> UNet2DModel:
    torch.manual_seed(0)
    return UNet2DModel(
        sample_size=8, in_channels=3, out_channels=3, layers_per_block=1,
        block_out_channels=(8, 16), down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"), norm_num_groups=4,
    )


@pytest.mark.parametrize("kind", ["ddpm", "ddim"])
def test_pipeline_to_device_equals_the_cpu(device, kind):
    pipeline_class, scheduler_class = (
        (DDPMPipeline, DDPMScheduler) if kind == "ddpm" else (DDIMPipeline, DDIMScheduler)
    )
    pipe = pipeline_class(unet=_unet(), scheduler=scheduler_class(num_train_timesteps=10))
    reference = pipe(generator=torch.Generator().manual_seed(0), num_inference_steps=3,
                     output_type="np").images
    pipe = pipe.to(device)
    assert pipe.device.type == device
    images = pipe(generator=torch.Generator().manual_seed(0), num_inference_steps=3,
                  output_type="np").images
    assert images.shape == (1, 8, 8, 3)
    assert float(abs(images - reference).max()) < 1e-4


def test_unet2d_condition_step_equals_the_cpu(device):
    from diffusers import UNet2DConditionModel

    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=(8, 16), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=16,
        norm_num_groups=4, attention_head_dim=4,
    )
    sample, text = torch.randn(2, 4, 8, 8), torch.randn(2, 5, 16)
    with torch.no_grad():
        reference = unet(sample, 3, encoder_hidden_states=text).sample
        unet = unet.to(device)
        got = unet(sample.to(device), 3, encoder_hidden_states=text.to(device)).sample
    assert got.device.type == device
    torch.testing.assert_close(got.cpu(), reference, atol=1e-4, rtol=1e-4)
