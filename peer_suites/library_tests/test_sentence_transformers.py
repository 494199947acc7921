"""sentence-transformers 6.2.0 as its users write it: no device given, so it picks Gaudi when
one is ready; on hpu every result is compared with the same model's on the CPU.

Covers what optimum-habana's sentence-transformers support did: ``encode`` (BERT with and
without ``token_type_ids``, normalized, as tensors), similarity and semantic search, the
CrossEncoder, and a short training run of ``SentenceTransformerTrainer``.
"""

from __future__ import annotations

import pytest
import torch
from conftest import bert_folder, sentences
from sentence_transformers import CrossEncoder, SentenceTransformer, util

ATOL = 1e-5


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> str:
    return bert_folder(tmp_path_factory.mktemp("bert"))


@pytest.mark.parametrize("token_type_ids", [False, True])
def test_encode_picks_the_device_and_equals_the_cpu(tmp_path, device, token_type_ids):
    folder = bert_folder(tmp_path, token_type_ids=token_type_ids)
    model = SentenceTransformer(folder)
    assert model.device.type == device
    got = model.encode(sentences(), convert_to_tensor=True)
    assert got.device.type == device
    cpu = SentenceTransformer(folder, device="cpu")
    reference = cpu.encode(sentences(), convert_to_tensor=True)
    torch.testing.assert_close(got.cpu(), reference, atol=ATOL, rtol=0)


def test_encode_normalized_numpy_batches(folder):
    model = SentenceTransformer(folder)
    got = model.encode(sentences(11), batch_size=4, normalize_embeddings=True)
    reference = SentenceTransformer(folder, device="cpu").encode(
        sentences(11), batch_size=4, normalize_embeddings=True
    )
    assert got.shape == (11, 32)
    assert abs(float((got**2).sum(axis=1).mean()) - 1.0) < 1e-5
    assert float(abs(got - reference).max()) < ATOL


def test_similarity_and_semantic_search(folder, device):
    model = SentenceTransformer(folder)
    queries = model.encode(sentences(3), convert_to_tensor=True)
    corpus = model.encode(sentences(8), convert_to_tensor=True)
    scores = model.similarity(queries, corpus)
    assert scores.device.type == device
    hits = util.semantic_search(queries, corpus, top_k=2)
    assert [hit[0]["corpus_id"] for hit in hits] == [0, 1, 2]  # each query finds itself
    cpu = SentenceTransformer(folder, device="cpu")
    reference = cpu.similarity(
        cpu.encode(sentences(3), convert_to_tensor=True),
        cpu.encode(sentences(8), convert_to_tensor=True),
    )
    torch.testing.assert_close(scores.cpu(), reference, atol=1e-4, rtol=0)


def test_cross_encoder_predict_equals_the_cpu(tmp_path, device):
    folder = bert_folder(tmp_path, head="ForSequenceClassification")
    pairs = list(zip(sentences(4), sentences(8)[4:], strict=True))
    model = CrossEncoder(folder)
    assert model.device.type == device
    got = model.predict(pairs, convert_to_tensor=True)
    reference = CrossEncoder(folder, device="cpu").predict(pairs, convert_to_tensor=True)
    torch.testing.assert_close(got.cpu(), reference, atol=ATOL, rtol=0)
    ranked = model.rank(sentences(1)[0], sentences(5), return_documents=False)
    assert sorted(r["corpus_id"] for r in ranked) == list(range(5))


def test_trainer_trains_on_the_device(folder, device, tmp_path):
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer import losses

    model = SentenceTransformer(folder)
    before = [p.detach().cpu().clone() for p in model.parameters()]
    data = Dataset.from_dict({"anchor": sentences(16), "positive": sentences(16)[::-1]})
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=4, report_to=[],
        save_strategy="no", logging_steps=1, seed=0,
    )
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=data,
        loss=losses.MultipleNegativesRankingLoss(model),
    )
    assert args.device.type == device
    result = trainer.train()
    assert torch.isfinite(torch.tensor(result.training_loss))
    assert next(model.parameters()).device.type == device
    after = [p.detach().cpu() for p in model.parameters()]
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
