"""The project's own small model testers for Transformers' ``ModelTesterMixin``.

A model tester builds a tiny config and a batch; the mixin's ~120 tests (save/load, resize
embeddings, attention outputs, gradient checkpointing, device placement, ...) then run on
``torch_device``. Transformers' own testers for these models are not in its sdist.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import PretrainedConfig
from transformers.testing_utils import torch_device


class TinyTester:
    """Shapes shared by the testers: small enough for a 2-core CI, large enough to mean it."""

    batch_size = 3
    seq_length = 7
    vocab_size = 99
    hidden_size = 32
    num_hidden_layers = 2
    num_attention_heads = 4
    intermediate_size = 37
    is_training = True
    num_labels = 3
    num_choices = 4

    def __init__(self, parent: Any, config_class: type[PretrainedConfig], **extra: Any) -> None:
        self.parent = parent
        self.config_class = config_class
        self.extra = extra

    def get_config(self) -> PretrainedConfig:
        return self.config_class(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            intermediate_size=self.intermediate_size,
            max_position_embeddings=64,
            num_labels=self.num_labels,
            **self.extra,
        )

    def prepare_config_and_inputs_for_common(
        self,
    ) -> tuple[PretrainedConfig, dict[str, torch.Tensor]]:
        generator = torch.Generator().manual_seed(0)
        shape = (self.batch_size, self.seq_length)
        input_ids = torch.randint(3, self.vocab_size, shape, generator=generator).to(torch_device)
        mask = torch.ones(shape, dtype=torch.long)
        mask[0, :2] = 0  # one left-padded row, as in batched generation
        return self.get_config(), {"input_ids": input_ids, "attention_mask": mask.to(torch_device)}


class CausalLMTester(TinyTester):
    """Decoder-only models (Llama, Qwen2): the heads the training mixin looks for."""

    def __init__(
        self, parent: Any, config_class: type[PretrainedConfig], causal_lm_class: type, **extra: Any
    ) -> None:
        super().__init__(parent, config_class, num_key_value_heads=2, **extra)
        self.causal_lm_class = causal_lm_class
        self.sequence_classification_class = None
