"""Generation on the test device, token for token against the same model on CPU.

Transformers' own ``GenerationTesterMixin`` is not in its sdist; this is the project's
coverage of what a device backend must get right in ``generate``: greedy search, sampling
with a seed, beam search, and the static cache. Each test builds the tester's model once,
generates on CPU and on ``torch_device`` (``hpu`` in the hpu run) and requires equal tokens:
the emulator runs CPU kernels, so anything else is a device-handling fault. Sampled tokens
are the exception: the device draws from its own random stream.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from transformers import GenerationConfig, set_seed
from transformers.testing_utils import torch_device


class GenerationCoverageMixin:
    """Mixed into a model test class that has ``model_tester`` and ``all_model_classes``."""

    model_tester: Any
    all_model_classes: tuple

    def _generative_model(self) -> tuple[torch.nn.Module, torch.Tensor]:
        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        config.pad_token_id = config.eos_token_id = None  # generate every requested token
        model_class = next(c for c in self.all_model_classes if c.can_generate())
        set_seed(0)
        model = model_class(config).eval()
        return model, inputs["input_ids"][:2, :5]

    def _tokens_on(
        self, device: str, model: torch.nn.Module, prompt: torch.Tensor, **options: Any
    ) -> list:
        on_device = copy.deepcopy(model).to(device)
        set_seed(1234)  # sampling draws from the device's generator
        config = GenerationConfig(max_new_tokens=6, min_new_tokens=6, **options)
        with torch.no_grad():
            out = on_device.generate(
                prompt.to(device),
                attention_mask=torch.ones_like(prompt).to(device),
                generation_config=config,
            )
        assert out.device.type == torch.device(device).type, out.device
        assert out.shape == (prompt.shape[0], prompt.shape[1] + 6), out.shape
        return out.cpu().tolist()

    def _assert_same_tokens(self, **options: Any) -> None:
        model, prompt = self._generative_model()
        reference = self._tokens_on("cpu", model, prompt, **options)
        assert self._tokens_on(torch_device, model, prompt, **options) == reference

    def test_greedy_tokens_equal_cpu(self) -> None:
        self._assert_same_tokens(do_sample=False)

    def test_sample_with_seed_repeats_and_top1_equals_cpu(self) -> None:
        # The device's generator is its own stream (on Gaudi as here), so sampled tokens are
        # not the CPU's for the same seed: the same seed repeats them on the device, and
        # sampling from one candidate gives the CPU's tokens.
        model, prompt = self._generative_model()
        sampled = [self._tokens_on(torch_device, model, prompt, do_sample=True, top_k=5,
                                   temperature=0.9) for _ in range(2)]
        assert sampled[0] == sampled[1]
        reference = self._tokens_on("cpu", model, prompt, do_sample=True, top_k=1)
        assert self._tokens_on(torch_device, model, prompt, do_sample=True, top_k=1) == reference

    def test_beam_search_tokens_equal_cpu(self) -> None:
        self._assert_same_tokens(do_sample=False, num_beams=3, num_return_sequences=1)

    def test_static_cache_tokens_equal_cpu(self) -> None:
        self._assert_same_tokens(do_sample=False, cache_implementation="static")
