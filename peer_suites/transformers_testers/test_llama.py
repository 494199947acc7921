"""Llama under Transformers' ModelTesterMixin, TrainingTesterMixin and generation coverage."""

from __future__ import annotations

import unittest

from generation_coverage import GenerationCoverageMixin
from model_testers import CausalLMTester
from tests.test_modeling_common import ModelTesterMixin
from tests.test_training_mixin import TrainingTesterMixin
from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification, LlamaModel


class LlamaPeerTest(
    ModelTesterMixin, GenerationCoverageMixin, TrainingTesterMixin, unittest.TestCase
):
    all_model_classes = (LlamaModel, LlamaForCausalLM, LlamaForSequenceClassification)
    model_tester = None  # set in setUp; the training mixin declares it abstract

    def setUp(self) -> None:
        self.model_tester = CausalLMTester(self, LlamaConfig, LlamaForCausalLM, pad_token_id=0)
