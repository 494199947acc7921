"""Every example of the reference page ("Intel Gaudi"), run as a user would, on the emulator.

The scripts are the page's, with the hub model replaced by a tiny local checkpoint; they
never import hpu_plugin: the plugin works from ``pip install`` alone.
"""

from __future__ import annotations

import json

import pytest

from .conftest import emulated_env, run

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("emulator")]


def test_is_torch_hpu_available(tmp_path):
    out = run(
        """
        from transformers import is_torch_hpu_available

        print(is_torch_hpu_available())
        """,
        emulated_env(tmp_path),
    )
    assert out.stdout.strip().splitlines()[-1] == "True"


def test_from_pretrained_device_map_hpu_and_generate(tmp_path, tiny_model):
    out = run(
        f"""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained({str(tiny_model)!r}, device_map="hpu")
        tokenizer = AutoTokenizer.from_pretrained({str(tiny_model)!r})

        inputs = tokenizer("intel gaudi is", return_tensors="pt").to(model.device)
        output = model.generate(**inputs, max_new_tokens=8, do_sample=False)
        print("device=", model.device.type)
        print("tokens=", output[0].tolist())

        cpu = AutoModelForCausalLM.from_pretrained({str(tiny_model)!r}, device_map="cpu")
        reference = cpu.generate(**inputs.to("cpu"), max_new_tokens=8, do_sample=False)
        print("cpu_device=", cpu.device.type)
        print("cpu_tokens=", reference[0].tolist())
        """,
        emulated_env(tmp_path),
    ).lines()
    assert out["device"] == "hpu"
    assert out["cpu_device"] == "cpu"  # the user's device_map wins
    assert out["tokens"] == out["cpu_tokens"]
    assert len(json.loads(out["tokens"])) > 3


def test_pipeline_without_device_runs_on_hpu(tmp_path, tiny_model):
    out = run(
        f"""
        from transformers import pipeline

        generator = pipeline("text-generation", model={str(tiny_model)!r})
        result = generator("intel gaudi is", max_new_tokens=4, do_sample=False)
        print("device=", generator.device)
        print("model_device=", generator.model.device.type)
        print("text=", bool(result[0]["generated_text"]))

        on_cpu = pipeline("text-generation", model={str(tiny_model)!r}, device="cpu")
        print("cpu_device=", on_cpu.device)
        import numpy
        # another Gaudi than the process's, also as numpy's integer: refused, with the fix
        for device in (1, "hpu:1", numpy.int64(1)):
            try:
                pipeline("text-generation", model={str(tiny_model)!r}, device=device)
            except ValueError as exc:
                print(f"refused_{{device!r}}=", "Fix: give every rank device='hpu'" in str(exc))
        """,
        emulated_env(tmp_path, devices=2),
    ).lines()
    assert out["device"].startswith("hpu")
    assert out["model_device"] == "hpu"
    assert out["text"] == "True"
    assert out["cpu_device"] == "cpu"
    assert out["refused_1"] == out["refused_'hpu:1'"] == out["refused_np.int64(1)"] == "True"


TRAIN = """
import math
import torch
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 16
    def __getitem__(self, i):
        ids = torch.tensor([(i * 7 + j) % 20 + 4 for j in range(16)])
        return {{"input_ids": ids, "labels": ids}}

model = AutoModelForCausalLM.from_pretrained({model!r})
training_args = TrainingArguments(
    output_dir={out!r},
    bf16=True,
    {extra}
    max_steps={steps}, per_device_train_batch_size=4, logging_steps=1, report_to=[],
    save_strategy="no", use_cpu=False,
)
print("device=", training_args.device)
print("backend=", training_args.torch_compile_backend)
result = Trainer(model=model, args=training_args, train_dataset=Data()).train()
print("loss_finite=", math.isfinite(result.training_loss))
print("param_device=", next(model.parameters()).device.type)
print("steps=", result.global_step)
"""


def test_training_arguments_bf16_device_is_hpu_and_trainer_trains(tmp_path, tiny_model):
    script = TRAIN.format(model=str(tiny_model), out=str(tmp_path / "out"), extra="", steps=3)
    out = run(script, emulated_env(tmp_path)).lines()
    assert out["device"].startswith("hpu")
    assert out["loss_finite"] == "True"
    assert out["param_device"] == "hpu"
    assert out["steps"] == "3"


def test_torch_compile_true_uses_hpu_backend_and_trains_compiled(tmp_path, tiny_model):
    script = TRAIN.format(
        model=str(tiny_model), out=str(tmp_path / "out"), extra="torch_compile=True,", steps=2
    )
    result = run(script, emulated_env(tmp_path))
    out = result.lines()
    assert out["backend"] == "hpu_backend"
    assert out["loss_finite"] == "True"
    assert out["steps"] == "2"
    # TrainingArguments asked for hpu_backend, so the Trainer's compile is not switched.
    # (bitsandbytes, when installed, compiles its own kernels with the default backend at
    # import: that switch is logged as "the default ('inductor')".)
    assert "backend 'inductor' does not run on Gaudi" not in result.stderr


def test_torch_compile_with_default_backend_warns_once_and_runs(tmp_path):
    result = run(
        """
        import torch

        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).to("hpu")
        compiled = torch.compile(model)
        x = torch.randn(4, 8, device="hpu")
        assert torch.allclose(compiled(x).cpu(), model(x).cpu())
        again = torch.compile(model, dynamic=False)
        assert torch.allclose(again(x).cpu(), model(x).cpu())

        @torch.compile
        def f(t):
            return t * 2 + 1
        print("decorated=", torch.equal(f(x).cpu(), (x * 2 + 1).cpu()))
        print("device=", compiled(x).device.type)
        """,
        emulated_env(tmp_path),
    )
    assert result.lines()["decorated"] == "True"
    assert result.lines()["device"] == "hpu"
    warnings = [line for line in result.stderr.splitlines() if "does not run on Gaudi" in line]
    assert len(warnings) == 1, result.stderr
    assert "hpu_backend" in warnings[0]
    assert "HPU_PLUGIN_DISABLE=compile to keep the backend you named" in warnings[0], warnings
    assert "graphs whose tensors are all elsewhere keep" in warnings[0], warnings


def test_user_choices_win(tmp_path):
    env = emulated_env(tmp_path, PT_ENABLE_INT64_SUPPORT="0")
    out = run(
        f"""
        import os
        import torch
        import torch.distributed as dist

        print("int64=", os.environ.get("PT_ENABLE_INT64_SUPPORT"))
        calls = []
        def mine(gm, example_inputs):
            calls.append(1)
            return gm.forward
        torch.compile(lambda t: t + 1, backend=mine)(torch.ones(2, device="hpu"))
        print("own_backend_used=", bool(calls))
        dist.init_process_group("gloo", init_method="file://{tmp_path / 'store'}",
                                rank=0, world_size=1)
        print("backend=", dist.get_backend())
        dist.destroy_process_group()
        """,
        env,
    ).lines()
    assert out["int64"] == "0"
    assert out["own_backend_used"] == "True"
    assert out["backend"] == "gloo"


def test_init_process_group_without_backend_uses_hccl(tmp_path):
    out = run(
        f"""
        import torch
        import torch.distributed as dist

        dist.init_process_group(init_method="file://{tmp_path / 'store'}", rank=0, world_size=1)
        print("backend=", dist.get_backend())
        t = torch.ones(3, device="hpu")
        dist.all_reduce(t)
        print("sum=", t.sum().item())
        dist.destroy_process_group()
        """,
        emulated_env(tmp_path),
    ).lines()
    assert out["backend"] == "hccl"
    assert float(out["sum"]) == 3.0


@pytest.mark.parametrize("bits", [4, 8])
def test_bitsandbytes_without_device_map_uses_the_current_hpu(tmp_path, bits):
    # 4-bit on HPU is NF4 only (fp4, the default, is refused: tests/quantization)
    options = "bnb_4bit_quant_type='nf4'" if bits == 4 else ""
    out = run(
        f"""
        from importlib import metadata
        import torch
        from transformers import BitsAndBytesConfig
        from transformers.quantizers.quantizer_bnb_{bits}bit import Bnb{bits}BitHfQuantizer

        print("current=", torch.hpu.current_device())
        try:
            config = BitsAndBytesConfig(load_in_{bits}bit=True, {options})
            quantizer = Bnb{bits}BitHfQuantizer(config)
        except metadata.PackageNotFoundError:  # Transformers 4.51 wants bitsandbytes for 4-bit
            quantizer = object.__new__(Bnb{bits}BitHfQuantizer)
        print("chosen=", quantizer.update_device_map(None))
        print("kept=", quantizer.update_device_map({{"": "cpu"}}))
        """,
        emulated_env(tmp_path, devices=2),
    ).lines()
    assert out["chosen"] == f"{{'': 'hpu:{out['current']}'}}"
    assert out["kept"] == "{'': 'cpu'}"


def test_refusals_reach_the_user_before_any_work(tmp_path):
    """Lazy mode cannot compile; nccl cannot run on Gaudi: both say so up front."""
    out = run(
        f"""
        import torch
        import torch.distributed as dist
        from transformers import TrainingArguments

        def attempt(name, action):
            try:
                action()
                print(name + "=", "accepted")
            except ValueError as exc:
                print(name + "=", type(exc).__name__, "|", str(exc).replace("\\n", " "))

        attempt("compile", lambda: torch.compile(lambda t: t))
        attempt("training_args", lambda: TrainingArguments(output_dir={str(tmp_path)!r},
                                                           torch_compile=True, report_to=[]))
        attempt("nccl", lambda: dist.init_process_group(
            "nccl", init_method="file://{tmp_path / 'store'}", rank=0, world_size=1))
        print("store_created=", __import__("os").path.exists({str(tmp_path / 'store')!r}))
        """,
        emulated_env(tmp_path, PT_HPU_LAZY_MODE="1"),
    ).lines()
    for name in ("compile", "training_args"):
        assert out[name] != "accepted"
        assert "PT_HPU_LAZY_MODE" in out[name]
    assert out["nccl"] != "accepted" and "'nccl'" in out["nccl"] and "hccl" in out["nccl"]
    assert out["store_created"] == "False"
