"""Scripts written for CUDA run unchanged on emulated Gaudi under the GPU Migration Toolkit,
with the results they give on the CPU (the same scripts, where they fall back to the CPU
without CUDA, or told so by their own command-line switch)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from .conftest import DATA, base_env, migrated_env, run

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("emulator")]

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone"]


def _json_line(stdout: str) -> dict:
    return json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])


def test_a_cuda_amp_training_script_matches_the_cpu(tmp_path):
    script = [sys.executable, str(DATA / "cuda_train.py")]
    gaudi = _json_line(run("", migrated_env(tmp_path), argv=script, cwd=tmp_path).stdout)
    cpu = _json_line(run("", base_env(tmp_path), argv=script, cwd=tmp_path).stdout)
    assert (gaudi["cuda"], gaudi["device"], gaudi["name"]) == (True, "hpu:0", "GAUDI2")
    assert (cpu["cuda"], cpu["device"]) == (False, "cpu")
    assert gaudi["peak_memory"] > 0
    # bf16 autocast on Gaudi against float32 on the CPU: same course, bf16-sized differences
    assert len(gaudi["losses"]) == len(cpu["losses"]) == 24
    assert gaudi["losses"] == pytest.approx(cpu["losses"], rel=3e-2, abs=1e-2)
    assert gaudi["accuracy"] == pytest.approx(cpu["accuracy"], abs=0.02)
    assert cpu["losses"][-1] < cpu["losses"][0] / 2  # it learns


def test_a_cuda_ddp_script_on_two_gaudi_matches_gloo_on_the_cpu(tmp_path):
    argv = [*TORCHRUN, "--nproc_per_node", "2", str(DATA / "cuda_ddp.py")]
    gaudi = _json_line(run("", migrated_env(tmp_path, devices=2), argv=argv, cwd=tmp_path).stdout)
    reference = run("", base_env(tmp_path), argv=argv, cwd=tmp_path, check=False)
    # The CPU reference is torch's own gloo, which now and then aborts a rank as the process
    # ends, after the script's work and its destroy_process_group() ("terminate called
    # without an active exception": gloo's worker threads at interpreter finalization,
    # pytorch/pytorch#179291, left unfixed there). Seen here 1 run in 10 with hpu-plugin not
    # loaded at all (TORCH_DEVICE_BACKEND_AUTOLOAD=0). Only that abort is forgiven, and only
    # in the reference: the Gaudi run above must exit cleanly.
    assert reference.returncode == 0 or (
        "terminate called without an active exception" in reference.stderr), reference.stderr
    cpu = _json_line(reference.stdout)
    # the toolkit runs nccl as hccl and answers nccl, as CUDA code expects
    assert (gaudi["backend"], gaudi["world"], gaudi["device"]) == ("nccl", 2, "hpu:0")
    assert (cpu["backend"], cpu["cuda"]) == ("gloo", False)
    assert gaudi["losses"] == pytest.approx(cpu["losses"], rel=1e-5, abs=1e-6)
    for got, want in zip(gaudi["weights"], cpu["weights"], strict=True):
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6)


EXAMPLES = DATA / "pytorch_examples"


@pytest.mark.migration_full
def test_pytorch_examples_single_gpu_ddp_tutorial(tmp_path):
    """``device = 0  # shorthand for cuda:0``, a DataLoader with ``pin_memory=True``."""
    script = EXAMPLES / "ddp-tutorial-series" / "single_gpu.py"
    done = run("", migrated_env(tmp_path), argv=[sys.executable, str(script), "2", "1"],
               cwd=tmp_path)
    assert done.stdout.count("[GPU0] Epoch") == 2
    saved = __import__("torch").load(tmp_path / "checkpoint.pt", map_location="cpu")
    assert set(saved) == {"weight", "bias"}


@pytest.mark.migration_full
def test_pytorch_examples_torchrun_ddp_tutorial(tmp_path):
    """``init_process_group(backend="nccl")``, ``torch.cuda.set_device(LOCAL_RANK)``,
    ``DDP(device_ids=[gpu_id])``, a snapshot saved and resumed with ``map_location="cuda:0"``."""
    script = EXAMPLES / "ddp-tutorial-series" / "multigpu_torchrun.py"
    argv = [*TORCHRUN, "--nproc_per_node", "1", str(script), "2", "1", "--batch_size", "64"]
    env = migrated_env(tmp_path, devices=8)  # an HLS server, as the tutorial's one node
    first = run("", env, argv=argv, cwd=tmp_path)
    assert first.stdout.count("[GPU0] Epoch") == 2, first.stdout
    resumed = run("", env, argv=[*argv[:-4], "3", "1"], cwd=tmp_path)
    assert "Resuming training from snapshot at Epoch 1" in resumed.stdout, resumed.stdout
    assert "[GPU0] Epoch 2" in resumed.stdout


@pytest.mark.migration_full
def test_pytorch_examples_torchrun_ddp_tutorial_on_two_gaudi_says_why_not(tmp_path):
    """The tutorial moves rank 1's model to ``cuda:1``; the toolkit maps it to ``hpu:1``,
    which no Gaudi process can address (one device per process): it fails as on Gaudi, with
    the emulator's message naming the fix."""
    script = EXAMPLES / "ddp-tutorial-series" / "multigpu_torchrun.py"
    argv = [*TORCHRUN, "--nproc_per_node", "2", str(script), "1", "1"]
    done = run("", migrated_env(tmp_path, devices=2), argv=argv, cwd=tmp_path, check=False)
    assert done.returncode != 0
    assert "habana active device: 1 != 0" in done.stderr
    assert "one process per device" in done.stderr


def _test_loss(stdout: str) -> float:
    found = re.search(r"End of training \| test loss +([\d.]+)", stdout)
    assert found, stdout[-2000:]
    return float(found.group(1))


@pytest.mark.migration_full
def test_pytorch_examples_word_language_model_matches_the_cpu(tmp_path):
    """The LSTM language model with its ``--cuda`` switch, saved and reloaded, on a small
    corpus (``--data``); shrunk by its own arguments only."""
    script = EXAMPLES / "word_language_model" / "main.py"
    args = [sys.executable, str(script), "--data", str(DATA / "tiny_corpus"), "--epochs", "1",
            "--emsize", "16", "--nhid", "16", "--bptt", "8", "--batch_size", "8",
            "--log-interval", "10", "--save", str(tmp_path / "model.pt")]
    gaudi = run("", migrated_env(tmp_path), argv=[*args, "--cuda"], cwd=tmp_path)
    cpu = run("", base_env(tmp_path), argv=args, cwd=tmp_path)
    assert "WARNING: You have a CUDA device" not in gaudi.stdout
    assert _test_loss(gaudi.stdout) == pytest.approx(_test_loss(cpu.stdout), rel=1e-3)


@pytest.fixture(scope="module")
def diffusers_installed() -> None:
    pytest.importorskip("diffusers", reason="diffusers is in requirements/test.txt")


DDPM = """
import json, sys, torch
from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel

torch.manual_seed(0)
unet = UNet2DModel(sample_size=8, in_channels=3, out_channels=3, layers_per_block=1,
                   block_out_channels=(8, 16), norm_num_groups=4,
                   down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                   up_block_types=("AttnUpBlock2D", "UpBlock2D"))
pipe = DDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=20))
device = sys.argv[1]
pipe = pipe.to(device)
images = pipe(batch_size=2, num_inference_steps=5, output_type="np",
              generator=torch.Generator("cpu").manual_seed(0)).images
print(json.dumps({"device": str(pipe.device), "shape": list(images.shape),
                  "pixels": images.flatten().tolist()}))
"""


def _without_bitsandbytes(tmp_path: Path, env: dict[str, str]) -> dict[str, str]:
    """A machine without bitsandbytes: bitsandbytes takes its CUDA branch when
    ``torch.cuda.is_available()``, which the toolkit makes True on a torch built without
    CUDA, and fails at import (on Gaudi too; docs/gpu-migration.md)."""
    hide = tmp_path / "no_bitsandbytes"
    hide.mkdir(exist_ok=True)
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['bitsandbytes'] = None\n")
    return {**env, "PYTHONPATH": str(hide)}


def _ddpm(tmp_path: Path, env: dict[str, str], device: str) -> dict:
    script = tmp_path / "ddpm.py"
    script.write_text(DDPM)
    env = _without_bitsandbytes(tmp_path, env)
    return _json_line(run("", env, argv=[sys.executable, str(script), device]).stdout)


def test_diffusers_pipelines_to_cuda_and_to_hpu_match_the_cpu(tmp_path, diffusers_installed):
    """``.to("cuda")`` under the toolkit; ``.to("hpu")`` by diffusers' own HPU branch (which
    sets ``PT_HPU_GPU_MIGRATION=1`` itself); both give the CPU's images."""
    cpu = _ddpm(tmp_path, base_env(tmp_path), "cpu")
    on_cuda = _ddpm(tmp_path, migrated_env(tmp_path), "cuda")
    from .conftest import emulated_env

    on_hpu = _ddpm(tmp_path, emulated_env(tmp_path), "hpu")
    assert cpu["shape"] == on_cuda["shape"] == on_hpu["shape"] == [2, 8, 8, 3]
    assert (on_cuda["device"], on_hpu["device"]) == ("hpu:0", "hpu:0")
    assert on_cuda["pixels"] == pytest.approx(cpu["pixels"], abs=1e-4)
    assert on_hpu["pixels"] == pytest.approx(cpu["pixels"], abs=1e-4)


HOSTS = """
import torch
from accelerate import Accelerator
accelerator = Accelerator()
model, optimizer = accelerator.prepare(torch.nn.Linear(4, 2), torch.optim.SGD(
    torch.nn.Linear(4, 2).parameters(), lr=0.1))
from transformers import TrainingArguments
print(accelerator.device, next(model.parameters()).device,
      TrainingArguments(output_dir="out", report_to=[]).device)
"""


@pytest.mark.migration_full
def test_accelerate_and_trainer_choose_gaudi_under_the_toolkit(tmp_path):
    env = _without_bitsandbytes(tmp_path, migrated_env(tmp_path))
    assert run(HOSTS, env, cwd=tmp_path).stdout.split() == ["hpu", "hpu:0", "hpu:0"]


@pytest.mark.migration_full
def test_with_bitsandbytes_installed_its_import_fails_under_the_toolkit(tmp_path):
    """The documented limit, as a user meets it (Transformers' TrainingArguments imports it)."""
    done = run(HOSTS, migrated_env(tmp_path), cwd=tmp_path, check=False)
    assert done.returncode != 0
    assert "_cuda_getCurrentRawStream" in done.stderr
