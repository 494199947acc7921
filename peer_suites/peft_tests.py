"""A pytest plugin for PEFT's suite: its testers' device, and the LoRA slice that runs.

Loaded with ``-p peer_suites.peft_tests`` into both PEFT runs (CPU and hpu).

Device. PEFT's tester classes (``PeftCommonTester`` and the classes of
``tests/test_custom_models.py``) take their device from ``peft.utils.infer_device()``, which
in PEFT 0.21.2 knows cuda, mps, mlu, xpu and npu but not hpu (``src/peft/utils/other.py``
lines 144-155). The plugin's PEFT adapter (``hpu_plugin/hosts/peft_adapter.py``) makes it
answer ``hpu`` on Gaudi, so in the hpu run the testers are already on hpu. Should the
adapter stay out (a PEFT release it was not tested on), the tests would run on CPU and
prove nothing about the device; this plugin then gives the tester classes the device PEFT's
``tests/testing_utils.py`` names for the accelerator (Accelerate's ``get_backend()``,
``hpu`` on Gaudi). It is a switch of the test harness, like Transformers'
``TRANSFORMERS_TEST_DEVICE``; when ``infer_device()`` and ``get_backend()`` agree it changes
nothing.

Selection. ``tests/test_custom_models.py`` has about 19 500 tests (every tuner times every
tiny model). The slice kept is plain LoRA and DoRA on each layer type PEFT's LoRA wraps
(Linear, Embedding, Transformers' Conv1D, Conv1d, Conv2d, MultiheadAttention) times the
behaviours a device backend can get wrong: forward in fp32/fp16/bf16, merge and unmerge,
save and load, training, and disabling or deleting adapters. Its models are built from
code in the test file, so nothing is downloaded.
"""

from __future__ import annotations

import pytest

CUSTOM_MODELS = "tests/test_custom_models.py::TestPeftCustomModel::"

# The test methods kept (TestPeftCustomModel, one run per case below).
CUSTOM_METHODS = frozenset(
    {
        "test_forward_output_finite",
        "test_forward_float16",
        "test_forward_bfloat16",
        "test_forward_float16_no_autocast",
        "test_forward_bfloat16_no_autocast",
        "test_merge_layers",
        "test_merge_layers_fp16",
        "test_merge_layers_is_idempotent",
        "test_safe_merge",
        "test_save_pretrained",
        "test_save_load_roundtrip",
        "test_load_multiple_adapters",
        "test_inference_safetensors",
        "test_load_model_low_cpu_mem_usage",
        "test_training_custom_models",
        "test_only_params_are_updated",
        "test_disable_adapters",
        "test_disable_adapters_with_merging",
        "test_delete_adapter",
        "test_peft_model_device_map",
    }
)

# The ``test_name`` of the cases kept: one per layer type LoRA wraps, plus DoRA and
# modules_to_save on Linear.
CUSTOM_CASES = frozenset(
    {
        "Vanilla MLP 4 LoRA",
        "Vanilla MLP 5 LoRA",
        "Vanilla MLP 8 LoRA with DoRA",
        "Embedding + transformers Conv1D 3 LoRA",
        "Conv1d LoRA",
        "Conv2d 1 LoRA",
        "MHA 1 LoRA",
    }
)


def _kept(item: pytest.Item) -> bool:
    """Whether a test of test_custom_models.py belongs to the slice (others are kept)."""
    if not item.nodeid.startswith(CUSTOM_MODELS):
        return True
    callspec = getattr(item, "callspec", None)
    name = getattr(item, "originalname", item.name)
    if callspec is None or name not in CUSTOM_METHODS:
        return False
    return callspec.params.get("test_name") in CUSTOM_CASES


def _device() -> str:
    """The accelerator PEFT's tests/testing_utils.py names (Accelerate's get_backend)."""
    from accelerate.test_utils.testing import get_backend

    return str(get_backend()[0])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the LoRA slice; give the kept tester classes the accelerator as their device."""
    kept = [item for item in items if _kept(item)]
    dropped = [item for item in items if not _kept(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    from peft.utils import infer_device

    inferred, device = infer_device(), _device()
    for cls in {item.cls for item in items if item.cls is not None}:
        if getattr(cls, "torch_device", None) == inferred != device:
            cls.torch_device = device
