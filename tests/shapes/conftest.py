"""Shape-bucket tests: user scripts in fresh interpreters on the emulated Gaudi.

The scripts never import hpu_plugin (the emulator and the adapters come in through
``import torch``); they build tiny models from a config, so nothing is downloaded.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping

import pytest
from processes import fresh_directory

TIMEOUT = 600
_SCRUB_PREFIXES = ("HPU_PLUGIN_", "HABANA_", "PT_HPU_", "PT_ENABLE_")


def _env(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k == "HPU_PLUGIN_CACHE_DIR" or not k.startswith(_SCRUB_PREFIXES)}
    # the uncompiled twin ``ref`` is the eager reference: no graphs of its own
    # (inference_graphs), which would also add to the compilations these tests count
    env.update(HPU_PLUGIN_EMULATE="1", PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", TRANSFORMERS_VERBOSITY="error",
               HPU_PLUGIN_FAST_GRAPHS="0")
    # each script compiles as a job's first run does: recipes kept on disk by an earlier
    # script would be read, not compiled, and the counts would be another test's
    env["PT_HPU_RECIPE_CACHE_CONFIG"] = f"{fresh_directory('hpu-plugin-test-recipes-')},false"
    env.update(extra or {})
    return env


def run_script(script: str, extra_env: Mapping[str, str] | None = None) -> str:
    """Run ``script``; fail with its output unless it exits 0; return its stdout."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=_env(extra_env),
                          capture_output=True, text=True, timeout=TIMEOUT)
    if proc.returncode != 0:
        pytest.fail(f"script failed ({proc.returncode})\n--- stdout\n{proc.stdout[-3000:]}\n"
                    f"--- stderr\n{proc.stderr[-6000:]}")
    return proc.stdout + "\n--- stderr\n" + proc.stderr


@pytest.fixture(scope="session")
def run() -> Callable[..., str]:
    build = subprocess.run([sys.executable, "-m", "hpu_emulator", "build"],
                           env=_env({"HPU_PLUGIN_EMULATE": ""}), capture_output=True, text=True,
                           timeout=900)
    if build.returncode != 0:
        pytest.fail(f"building the emulator failed:\n{build.stderr[-4000:]}")
    return run_script


#: A tiny model from a config, for scripts: LLAMA or QWEN2, ``model`` on hpu and ``ref``, an
#: uncompiled twin with the same weights.
MODELS = """
import torch
from transformers import {cls}, {config}
torch.manual_seed(0)
config = {config}(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                  pad_token_id=0, bos_token_id=1, eos_token_id=2)
model = {cls}(config).eval().to("hpu")
ref = {cls}(config).eval().to("hpu")
ref.load_state_dict(model.state_dict())
"""
LLAMA = MODELS.format(cls="LlamaForCausalLM", config="LlamaConfig")
#: For scripts that report which collator the training batches came from: the Trainer's
#: ``data_collator`` stays the user's object, and the bucketing wraps it in the dataloader.
TRAINING_COLLATOR = '''
def training_collator(trainer):
    fn = trainer.get_train_dataloader().collate_fn
    return type(getattr(fn, "data_collator", fn)).__name__  # inside RemoveColumnsCollator
'''
QWEN2 = MODELS.format(cls="Qwen2ForCausalLM", config="Qwen2Config")


#: A tiny Qwen2-VL's config, ``config``, for scripts (needs ``import transformers as T``):
#: token 150 is an image's, 152 and 153 open and close the image; images of 4 x 4 patches of
#: 24 values each (``pixel_values`` rows) are 4 tokens.
QWEN2_VL_CONFIG = '''
config = T.Qwen2VLConfig(
    text_config=dict(vocab_size=160, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                     rope_parameters={"rope_type": "default", "mrope_section": [2, 1, 1],
                                      "rope_theta": 10000.0}),
    vision_config=dict(depth=2, embed_dim=32, hidden_size=32, num_heads=4, patch_size=2,
                       spatial_merge_size=2, temporal_patch_size=2, in_channels=3),
    image_token_id=150, video_token_id=151, vision_start_token_id=152, vision_end_token_id=153,
    pad_token_id=0)
'''
