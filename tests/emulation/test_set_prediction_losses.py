"""Detection and segmentation losses under Gaudi's bf16 autocast: DETR's and Mask2Former's
losses match predictions to targets with SciPy on the host, which refuses the bf16 cost
matrix Gaudi's autocast makes (it runs ``softmax`` and ``mul`` in bf16, where CUDA's runs
them in float32). A bf16 ``Trainer`` trains DETR on ``hpu`` as on the CPU, and Mask2Former as
in float32 on ``hpu`` (its loss samples points with the device's generator, so the CPU's
points are other points)."""

from __future__ import annotations

import pytest
from processes import result_of

COMMON = r"""
import json
import torch
from torch.utils.data import Dataset
from transformers import Trainer, TrainingArguments

class Rows(Dataset):
    def __init__(self, rows):
        self.rows = rows
    def __len__(self):
        return len(self.rows)
    def __getitem__(self, i):
        return self.rows[i]

def losses(model, rows, collate, **options):
    args = TrainingArguments("out", per_device_train_batch_size=2, max_steps=3, logging_steps=1,
                             learning_rate=1e-4, report_to=[], save_strategy="no",
                             disable_tqdm=True, **options)
    trainer = Trainer(model=model, args=args, train_dataset=Rows(rows), data_collator=collate)
    trainer.train()
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
"""

DETR = COMMON + r"""
from transformers import DetrConfig, DetrForObjectDetection, ResNetConfig

def detr():
    torch.manual_seed(0)
    return DetrForObjectDetection(DetrConfig(
        use_timm_backbone=False, use_pretrained_backbone=False, backbone_config=ResNetConfig(
            embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], out_features=["stage2"]),
        d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, num_queries=10,
        num_labels=4, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0))

rng = torch.Generator().manual_seed(1)
rows = [{"pixel_values": torch.randn(3, 64, 64, generator=rng),
         "labels": {"class_labels": torch.randint(0, 4, (2,), generator=rng),
                    "boxes": torch.rand(2, 4, generator=rng) * 0.3 + 0.2}} for _ in range(6)]

def collate(batch):
    return {"pixel_values": torch.stack([r["pixel_values"] for r in batch]),
            "labels": [r["labels"] for r in batch]}

print("RESULT" + json.dumps({"hpu": losses(detr(), rows, collate, bf16=True),
                             "cpu": losses(detr(), rows, collate, bf16=True, use_cpu=True)}))
"""

MASK2FORMER = COMMON + r"""
from transformers import Mask2FormerConfig, Mask2FormerForUniversalSegmentation, SwinConfig

def mask2former():
    torch.manual_seed(0)
    backbone = SwinConfig(image_size=64, patch_size=4, embed_dim=16, depths=[1, 1, 2, 1],
                          num_heads=[1, 1, 2, 2], window_size=4,
                          out_features=["stage1", "stage2", "stage3", "stage4"])
    return Mask2FormerForUniversalSegmentation(Mask2FormerConfig(
        backbone_config=backbone, num_labels=5, hidden_dim=32, num_queries=8, encoder_layers=2,
        decoder_layers=3, encoder_feedforward_dim=64, dim_feedforward=64,
        mask_feature_size=32, feature_size=32, num_attention_heads=2, train_num_points=64))

rng = torch.Generator().manual_seed(1)
rows = [{"pixel_values": torch.randn(3, 64, 64, generator=rng),
         "mask_labels": (torch.rand(2, 64, 64, generator=rng) > 0.5).float(),
         "class_labels": torch.randint(0, 5, (2,), generator=rng)} for _ in range(6)]

def collate(batch):
    return {"pixel_values": torch.stack([r["pixel_values"] for r in batch]),
            "mask_labels": [r["mask_labels"] for r in batch],
            "class_labels": [r["class_labels"] for r in batch]}

# the loss samples points with the device's generator: bf16 is compared with float32 on hpu
torch.manual_seed(2)
bf16 = losses(mask2former(), rows, collate, bf16=True)
torch.manual_seed(2)
fp32 = losses(mask2former(), rows, collate)
print("RESULT" + json.dumps({"bf16": bf16, "fp32": fp32}))
"""


def _close(got: list[float], want: list[float], tolerance: float) -> bool:
    return len(got) == len(want) == 3 and all(
        abs(g - w) <= tolerance * abs(w) for g, w in zip(got, want, strict=True))


@pytest.mark.e2e
def test_detr_trains_in_bf16_as_on_the_cpu(run):
    got = result_of(run(DETR, {"TRANSFORMERS_VERBOSITY": "error"}, timeout=600).stdout)
    assert _close(got["hpu"], got["cpu"], 2e-2), got


@pytest.mark.e2e
def test_mask2former_trains_in_bf16(run):
    got = result_of(run(MASK2FORMER, {"TRANSFORMERS_VERBOSITY": "error"}, timeout=600).stdout)
    assert _close(got["bf16"], got["fp32"], 2e-2), got
