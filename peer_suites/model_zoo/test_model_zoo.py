"""Every causal-LM, masked-LM and sequence-to-sequence architecture Transformers ships, as
a user runs it on Gaudi: a tiny model built from its config (``tiny_configs``), copied to
the run's device, against the same weights on the CPU. Logits of a batch with a
left-padded row, greedy ``generate()`` (four new tokens, the padded row included) and three
AdamW steps must give the CPU's results, with Gaudi's fast paths at their defaults
(``fast``) and off (``plain``, ``HPU_PLUGIN_FAST=0``).

In the CPU run the copy stays on the CPU: there the test says whether the architecture
builds and runs at all, and the peer suites' comparison then asks every architecture that
passes on the CPU to pass on hpu. The families Gaudi's fast paths touch run in CI; the
rest are marked ``full``.
"""

from __future__ import annotations

import copy

import pytest
import torch
import transformers
from tiny_configs import BATCH, LENGTH, architectures, build

#: Run in CI: the families the fast paths change (fused attention, RMSNorm, rotary
#: embeddings, MoE experts), and one of each other kind.
CI_FAMILIES = {
    "causal": {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
               "phi3", "gemma", "gpt2", "gpt_oss"},
    "masked": {"bert", "roberta"},
    "seq2seq": {"t5", "bart"},
}
#: fp32 on both sides: the emulated kernels are the CPU's, the fused ones accumulate in fp32.
TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}
NEW_TOKENS = 4
STEPS = 3


def _cases() -> list[pytest.param]:
    cases = []
    for kind in ("causal", "masked", "seq2seq"):
        for model_type, name in architectures(kind).items():
            marks = [] if model_type in CI_FAMILIES[kind] else [pytest.mark.full]
            for paths in ("fast", "plain"):
                cases.append(pytest.param(kind, name, paths, marks=marks,
                                          id=f"{kind}-{model_type}-{paths}"))
    return cases


def _inputs(kind: str) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 99, (BATCH, LENGTH), generator=generator)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # a left-padded row, as batched generation pads
    ids[0, :2] = 0
    inputs = {"input_ids": ids, "attention_mask": mask}
    if kind == "seq2seq":
        inputs["decoder_input_ids"] = ids[:, :4].clamp(min=1)
    return inputs


def _on(inputs: dict[str, torch.Tensor], device: str) -> dict[str, torch.Tensor]:
    return {name: tensor.to(device) for name, tensor in inputs.items()}


def _labels(kind: str, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    batch = dict(inputs)
    if kind == "seq2seq":
        batch["labels"] = batch.pop("decoder_input_ids")
    else:
        batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    return batch


def _train(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> list[float]:
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(STEPS):
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize(("kind", "name", "paths"), _cases())
def test_same_results_as_the_cpu(kind: str, name: str, paths: str, device: str,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    if paths == "plain":
        monkeypatch.setenv("HPU_PLUGIN_FAST", "0")
    model_class = getattr(transformers, name)
    inputs = _inputs(kind)
    reference = build(model_class, kind, inputs)
    model = copy.deepcopy(reference).to(device)

    with torch.no_grad():
        want = reference(**inputs).logits
        got = model(**_on(inputs, device)).logits.cpu()
    torch.testing.assert_close(got, want, **TOLERANCE, msg=lambda m: f"logits: {m}")

    if kind != "masked" and reference.can_generate():
        prompt = {k: v for k, v in inputs.items() if k != "decoder_input_ids"}
        options = {"max_new_tokens": NEW_TOKENS, "min_new_tokens": NEW_TOKENS,
                   "do_sample": False, "pad_token_id": 0}
        want_tokens = reference.generate(**prompt, **options)
        got_tokens = model.generate(**_on(prompt, device), **options).cpu()
        assert got_tokens.tolist() == want_tokens.tolist(), "greedy tokens differ"

    batch = _labels(kind, inputs)
    want_losses = _train(reference, batch)
    got_losses = _train(model, _on(batch, device))
    torch.testing.assert_close(torch.tensor(got_losses), torch.tensor(want_losses),
                               **TOLERANCE, msg=lambda m: f"training losses: {m}")
