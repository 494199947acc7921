"""Qwen2 under Transformers' ModelTesterMixin, TrainingTesterMixin and generation coverage."""

from __future__ import annotations

import unittest

from generation_coverage import GenerationCoverageMixin
from model_testers import CausalLMTester
from tests.test_modeling_common import ModelTesterMixin
from tests.test_training_mixin import TrainingTesterMixin
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2ForSequenceClassification, Qwen2Model


class Qwen2PeerTest(
    ModelTesterMixin, GenerationCoverageMixin, TrainingTesterMixin, unittest.TestCase
):
    all_model_classes = (Qwen2Model, Qwen2ForCausalLM, Qwen2ForSequenceClassification)
    model_tester = None  # set in setUp; the training mixin declares it abstract

    def setUp(self) -> None:
        self.model_tester = CausalLMTester(self, Qwen2Config, Qwen2ForCausalLM, pad_token_id=0)
