"""Gaudi's recipe cache on disk: a job's second run reads the recipes its first run compiled.

The plugin sets ``PT_HPU_RECIPE_CACHE_CONFIG`` where the user set nothing (a directory under
its cache, kept between runs), and the emulator keeps recipes there as the bridge's disk cache
does. The job is a default ``Trainer`` (its decoder layers trained through compiled graphs).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import processes
import pytest
from processes import TRAINING_ROWS, result_of

from hpu_plugin.gaudi import environment

SCRIPT = TRAINING_ROWS + r"""
import json, os
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments
from habana_frameworks.torch.hpu.metrics import metric_global

def compilations():
    return dict(metric_global("graph_compilation").stats())["TotalNumber"]

torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(
    vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0))
seen = Losses()
args = TrainingArguments(output_dir="/tmp/hpu-plugin-test-recipes", max_steps=4,
                         per_device_train_batch_size=2, report_to=[], save_strategy="no",
                         logging_steps=1, seed=0, disable_tqdm=True)
Trainer(model=model, args=args, train_dataset=Rows(), data_collator=collate,
        callbacks=[seen]).train()
print("RESULT" + json.dumps({"compilations": compilations(), "losses": seen.losses,
                             "cache": os.environ.get("PT_HPU_RECIPE_CACHE_CONFIG")}))
"""


@pytest.mark.e2e
def test_a_second_run_of_the_same_job_compiles_nothing(run, tmp_path: Path):
    cache = {"PT_HPU_RECIPE_CACHE_CONFIG": f"{tmp_path / 'recipes'},false,1024",
             "TRANSFORMERS_VERBOSITY": "error"}
    first = result_of(run(SCRIPT, cache).stdout)
    second = result_of(run(SCRIPT, cache).stdout)
    assert first["compilations"] > 0 and second["compilations"] == 0, (first, second)
    assert second["losses"] == first["losses"]
    # a delete flag of true starts from an empty directory: everything compiles again
    fresh = result_of(run(SCRIPT, {**cache, "PT_HPU_RECIPE_CACHE_CONFIG":
                                   f"{tmp_path / 'recipes'},true"}).stdout)
    assert fresh["compilations"] == first["compilations"], (first, fresh)


@pytest.mark.e2e
def test_the_plugin_keeps_recipes_in_its_cache_unless_the_user_chose(run, tmp_path: Path):
    probe = ("import json, os, torch; print('RESULT' + json.dumps("
             "os.environ.get('PT_HPU_RECIPE_CACHE_CONFIG')))")
    chosen = run(probe, {"PT_HPU_RECIPE_CACHE_CONFIG": f"{tmp_path},true"}).stdout
    assert result_of(chosen) == f"{tmp_path},true"
    env = processes.emulated(HF_HUB_OFFLINE="1")
    del env["PT_HPU_RECIPE_CACHE_CONFIG"]  # as a user's shell has it: unset
    default = result_of(processes.run([sys.executable, "-c", probe], env, 300).stdout)
    assert default == environment.recipe_cache_default(env), default
    assert default.endswith(os.path.join("", "recipes") + ",false,1024"), default


@pytest.mark.e2e
def test_a_cache_directory_with_a_comma_gets_no_recipe_cache_and_says_so(tmp_path: Path):
    """The bridge splits the setting at each ',' and stops at the first compile on more than
    three parts: with such a directory the plugin sets no recipe cache and says why."""
    probe = ("import json, os, torch; f = torch.compile(lambda x: x * 2, backend='hpu_backend');"
             "f(torch.ones(2, device='hpu')); print('RESULT' + json.dumps("
             "os.environ.get('PT_HPU_RECIPE_CACHE_CONFIG')))")
    env = processes.emulated(HF_HUB_OFFLINE="1", HPU_PLUGIN_CACHE_DIR=str(tmp_path / "a,b"))
    del env["PT_HPU_RECIPE_CACHE_CONFIG"]
    done = processes.run([sys.executable, "-c", probe], env, 300)
    assert result_of(done.stdout) is None, done.stderr
    assert "no recipe cache on disk" in done.stderr and "HPU_PLUGIN_CACHE_DIR" in done.stderr


@pytest.mark.parametrize("value, told", [
    ("/x,false,1024,extra", "into 4 parts"),
    ("/x,yes", "second part 'yes'"),
    ("/x,true,lots", "size 'lots'"),
])
def test_a_recipe_cache_setting_the_bridge_stops_on_is_refused(value, told):
    with pytest.raises(environment.EnvironmentValueError, match=told) as info:
        environment.check_recipe_cache(value)
    assert str(info.value).startswith(f"PT_HPU_RECIPE_CACHE_CONFIG={value!r}")


@pytest.mark.parametrize("value", ["/x", "/x,", "/x,true", "/x,,2048", "/x,FALSE,0x400", ""])
def test_recipe_cache_settings_the_bridge_takes_pass(value):
    environment.check_recipe_cache(value)
