"""What the training benchmarks share: rows of token ids of random lengths, the collator
that pads them to the longest row of a batch (what a user's collator does), and a tiny Llama
configuration. Imported by the scripts of this folder (``python bench/<script>.py`` puts
the folder on ``sys.path``)."""

from __future__ import annotations

import random

import torch
from torch.utils.data import Dataset


class Rows(Dataset):
    """``count`` rows of ``low`` to ``high`` token ids each (the same rows on every run)."""

    def __init__(self, count: int, low: int = 4, high: int = 120) -> None:
        rng = random.Random(1)
        self.lengths = [rng.randint(low, high) for _ in range(count)]

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> dict[str, list[int]]:
        ids = [3 + (i * 7 + j) % 250 for j in range(self.lengths[i])]
        return {"input_ids": ids, "labels": ids}


def collate(features: list[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
    """Right-padded to the longest row: ids 0, mask 0, labels -100."""
    longest = max(len(f["input_ids"]) for f in features)
    ids = torch.zeros((len(features), longest), dtype=torch.long)
    mask = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for row, f in enumerate(features):
        n = len(f["input_ids"])
        ids[row, :n] = torch.tensor(f["input_ids"])
        mask[row, :n] = 1
        labels[row, :n] = torch.tensor(f["labels"])
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}
