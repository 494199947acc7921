"""BERT (an encoder) under Transformers' ModelTesterMixin and TrainingTesterMixin.

BertLMHeadModel is left out: it can generate, and the decoder models cover generation.
"""

from __future__ import annotations

import unittest

from model_testers import TinyTester
from tests.test_modeling_common import ModelTesterMixin
from tests.test_training_mixin import TrainingTesterMixin
from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification, BertModel


class BertTester(TinyTester):
    """The training mixin trains the sequence-classification head of an encoder."""

    causal_lm_class = None
    sequence_classification_class = BertForSequenceClassification


class BertPeerTest(ModelTesterMixin, TrainingTesterMixin, unittest.TestCase):
    all_model_classes = (BertModel, BertForMaskedLM, BertForSequenceClassification)
    model_tester = None  # set in setUp; the training mixin declares it abstract

    def setUp(self) -> None:
        self.model_tester = BertTester(self, BertConfig, type_vocab_size=2)
