"""End-to-end tests: the user's scripts run in subprocesses and never import hpu_plugin.

The plugin activates inside their ``import torch`` through the ``torch.backends`` entry
point of this venv, on the emulator (``HPU_PLUGIN_EMULATE=1``).
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import processes
import pytest
from distributions import pip_installed
from processes import scrubbed

HERE = Path(__file__).parent
TIMEOUT = 600

#: For scripts that compare an op's result on hpu with Gaudi's compile fault (synStatus 26,
#: which the emulator models): the result as a list, or which error it raised.
OUTCOME = """
def outcome(fn):
    try:
        return repr(fn().cpu().tolist())
    except RuntimeError as exc:
        return "synStatus26" if "synStatus 26" in str(exc) else "error"
"""


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    def lines(self) -> dict[str, str]:
        """``key=value`` lines the scripts print, as a dict."""
        pairs = (line.split("=", 1) for line in self.stdout.splitlines() if "=" in line)
        return {key.strip(): value.strip() for key, value in pairs}


def base_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = scrubbed()
    env.update(
        HF_HOME=str(tmp_path / "hf_home"),  # no default accelerate config, no hub cache
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def emulated_env(tmp_path: Path, devices: int = 1, **extra: str) -> dict[str, str]:
    return base_env(
        tmp_path, HPU_PLUGIN_EMULATE="1", HPU_PLUGIN_EMULATE_DEVICES=str(devices), **extra
    )


def run(
    script: str, env: dict[str, str], *, argv: list[str] | None = None, cwd: Path | None = None,
    timeout: int = TIMEOUT, check: bool = True,
) -> Result:
    """Run ``script`` (Python source) as a user's program, or ``argv`` when given."""
    command = argv if argv is not None else [sys.executable, "-c", textwrap.dedent(script)]
    proc = processes.run(command, env, timeout, cwd, check)
    return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture(scope="session")
def emulator(tmp_path_factory) -> None:
    """Fail every test here, with the emulator's own message, when it cannot start."""
    tmp = tmp_path_factory.mktemp("probe")
    probe = run(
        "import torch; print('ready=', hasattr(torch, 'hpu') and torch.hpu.is_available())",
        emulated_env(tmp), check=False, timeout=900,
    )
    if "ready= True" in probe.stdout:
        return
    pytest.fail(f"the Gaudi emulator does not start:\n{probe.stderr.strip()[-2000:]}")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A tiny Llama and a local tokenizer, saved as a user's checkpoint directory."""
    path = tmp_path_factory.mktemp("tiny-llama")
    run(
        f"""
        import torch
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

        words = "intel gaudi is a fast accelerator for deep learning models and it runs".split()
        vocab = {{"<unk>": 0, "<s>": 1, "</s>": 2, "<pad>": 3}}
        vocab.update({{w: i + 4 for i, w in enumerate(words)}})
        tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                       eos_token="</s>", pad_token="<pad>",
                                       model_input_names=["input_ids", "attention_mask"])
        fast.save_pretrained({str(path)!r})
        torch.manual_seed(0)
        config = LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, intermediate_size=128, vocab_size=1000,
                             bos_token_id=1, eos_token_id=2, pad_token_id=3)
        LlamaForCausalLM(config).save_pretrained({str(path)!r})
        """,
        base_env(path),
    )
    return path


@pytest.fixture(scope="session")
def override_plugin(tmp_path_factory) -> Iterator[str]:
    """The third-party test plugin, pip-installed as a real distribution for the session."""
    build = tmp_path_factory.mktemp("override")
    with pip_installed({"hpu-test-override": HERE / "override_plugin"}, build):
        yield "hpu_test_override"
