"""Seeding, RNG checkpoints and ``accelerate env`` on the emulator."""

from __future__ import annotations

import os
import sys

import pytest

from .conftest import emulated_env, run

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("emulator")]


def test_seeding_and_rng_checkpoints_cover_hpu(tmp_path):
    out = run(
        f"""
        import torch
        import transformers
        import accelerate.utils
        from transformers import Trainer, TrainingArguments

        transformers.set_seed(7)
        a = torch.rand(4, device="hpu")
        transformers.set_seed(7)
        b = torch.rand(4, device="hpu")
        accelerate.utils.set_seed(7)
        c = torch.rand(4, device="hpu")
        print("transformers_seed=", torch.equal(a.cpu(), b.cpu()))
        print("accelerate_seed=", torch.equal(a.cpu(), c.cpu()))

        class Data(torch.utils.data.Dataset):
            def __len__(self):
                return 8
            def __getitem__(self, i):
                return {{"x": torch.randn(4), "labels": torch.randn(1)}}

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = torch.nn.Linear(4, 1)
            def forward(self, x, labels=None):
                return {{"loss": torch.nn.functional.mse_loss(self.linear(x), labels)}}

        args = TrainingArguments(output_dir={str(tmp_path / "out")!r}, max_steps=2,
                                 save_strategy="steps", save_steps=2, report_to=[],
                                 per_device_train_batch_size=4)
        Trainer(model=Net(), args=args, train_dataset=Data()).train()
        states = torch.load({str(tmp_path / "out" / "checkpoint-2" / "rng_state.pth")!r},
                            weights_only=False)
        print("rng_keys=", ",".join(sorted(states)))
        """,
        emulated_env(tmp_path),
    ).lines()
    assert out["transformers_seed"] == "True"
    assert out["accelerate_seed"] == "True"
    assert "hpu" in out["rng_keys"].split(",")


def test_accelerate_env_lists_gaudi(tmp_path):
    env = emulated_env(tmp_path, devices=2)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    accelerate = os.path.join(os.path.dirname(sys.executable), "accelerate")
    out = run("", env, argv=[accelerate, "env"]).stdout
    assert "- HPU count: 2" in out
    assert "- HPU type: GAUDI" in out
    assert "- hpu-plugin status: active (emulated Gaudi)" in out


def test_transformers_env_has_a_gaudi_section(tmp_path):
    env = emulated_env(tmp_path, devices=2)
    transformers_cli = os.path.join(os.path.dirname(sys.executable), "transformers")
    if not os.path.exists(transformers_cli):  # 4.51 to 4.57 name it transformers-cli
        transformers_cli += "-cli"
    out = run("", env, argv=[transformers_cli, "env"]).stdout
    assert "HPU" in out
    assert "- Gaudi devices: 2" in out
    assert "- hpu-plugin status: active (emulated Gaudi)" in out
    assert "- Gaudi mode: eager" in out


def test_transformers_env_without_gaudi_is_unchanged(tmp_path):
    env = {**emulated_env(tmp_path), "HPU_PLUGIN_EMULATE": "0"}
    transformers_cli = os.path.join(os.path.dirname(sys.executable), "transformers")
    if not os.path.exists(transformers_cli):
        transformers_cli += "-cli"
    out = run("", env, argv=[transformers_cli, "env"]).stdout
    assert "hpu-plugin" not in out
    assert "Gaudi" not in out
