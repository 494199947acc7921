"""Which host tests run, where, and with which device switches.

Each suite names the distribution whose sdist supplies the tests, the test paths of the CI
subset and of the full run, and the environment of each device. ``cpu`` is the hosts' own
CPU run (the emulator off); ``hpu`` is the emulated Gaudi with two devices (the hosts'
multi-device tests need two) and the hosts' own device switches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Accelerate's core files (issue 9): the device, big-model, modeling, multi-device,
# utilities, data loader, checkpointing, gradient sync, optimizer and kwargs handlers.
_ACCELERATE_CORE = [
    "tests/test_accelerator.py",
    "tests/test_big_modeling.py",
    "tests/test_modeling_utils.py",
    "tests/test_multidevice.py",
    "tests/test_utils.py",
    "tests/test_data_loader.py",
    "tests/test_state_checkpointing.py",
    "tests/test_grad_sync.py",
    "tests/test_optimizer.py",
    "tests/test_kwargs_handlers.py",
]
_ACCELERATE_MORE = [
    "tests/test_hooks.py",
    "tests/test_memory_utils.py",
    "tests/test_offload.py",
    "tests/test_scheduler.py",
    "tests/test_metrics.py",
]

# PEFT: (1) its accelerator tests (tests/test_common_gpu.py, class-level @require_non_cpu) for
# LoRA and AdaLoRA/RandLoRA with bitsandbytes 4-bit and 8-bit: QLoRA is what PEFT users run on
# Gaudi; the checkpoints they load are tiny offline stand-ins (peer_suites/hub_stand_ins.py).
# (2) A LoRA slice of tests/test_custom_models.py (LoRA and DoRA on each layer type: forward,
# merge, save/load, training, disabling adapters), run on the accelerator: PEFT's testers
# pick their device with peft.utils.infer_device, hpu on Gaudi through the plugin's PEFT
# adapter (peer_suites/peft_tests.py is the harness's fallback). Its models are built in the
# test file: nothing is downloaded.
_PEFT = ["tests/test_common_gpu.py", "tests/test_custom_models.py"]
# Left out of (1): the two mixed-adapter-batch tests (they need the real checkpoint's
# tokenizer) and test_lora_bnb_quantization_from_pretrained_safetensors (it loads a LoRA
# adapter from the Hub). peft_tests.py narrows TestPeftCustomModel to its slice.
_PEFT_SELECTION = (
    "(lora and (4bit or 8bit or bnb) and not dora and not multi_gpu"
    " and not mixed_adapter_batches and not test_lora_bnb_quantization_from_pretrained)"
    " or TestPeftCustomModel"
)
# PEFT 0.21.2's pytest settings make every FutureWarning from transformers an error
# (pyproject.toml:67), and PEFT calls two Transformers methods that 5.24 deprecates with a
# FutureWarning (src/transformers/modeling_utils.py:3204, 3308-3316): PeftModel.__init__ reads
# model.is_gradient_checkpointing (src/peft/peft_model.py:184) and
# prepare_model_for_kbit_training calls gradient_checkpointing_enable. get_peft_model on any
# Transformers model then fails, on CPU as on any device. 0.21.2 is the newest PEFT release.
# These two messages are ignored (a -W filter wins over the ini's); every other warning keeps
# PEFT's own rule.
_PEFT_ARGS = [
    "-p",
    "peer_suites.peft_tests",
    "-W",
    "ignore:`is_gradient_checkpointing` is deprecated:FutureWarning",
    "-W",
    "ignore:`gradient_checkpointing_enable` is deprecated:FutureWarning",
    "-k",
    _PEFT_SELECTION,
]

_TRANSFORMERS = HERE / "transformers_testers"

# The libraries optimum-habana covered. Their PyPI source distributions ship no test suite
# (sentence-transformers 6.2.0: tests/test_merging.py alone, which needs mergekit and pins
# device="cpu"; TRL 1.16.0: no tests/ at all; diffusers 0.42.1: tests/testing_utils.py alone),
# and packages come from PyPI only. So, as for Transformers' model tests, the project writes
# the tests (peer_suites/library_tests/): what each library's users run, on tiny models
# built from a config, with the library's own device choice (no device given) on each run,
# and on hpu the result compared with the CPU's.
_LIBRARY_TESTS = HERE / "library_tests"

# Every causal-LM, masked-LM and seq2seq architecture of Transformers' auto mappings, tiny,
# against the CPU (peer_suites/model_zoo/). CI runs the families the fast paths touch.
_MODEL_ZOO = HERE / "model_zoo"

_CHECKOUT_ARGS = [
    "-p", "peer_suites.checkout_tests", "--continue-on-collection-errors",
    "--tb=line",  # tracebacks of offline Hub failures took most of the run
]
# sentence-transformers' own tests: utilities, samplers, modules, losses, the model and the
# CrossEncoder. Most load small Hub models and fail on both runs offline; the rest build
# theirs locally. The library chooses its device (hpu in that run).
_SENTENCE_TRANSFORMERS_CHECKOUT = [
    "tests/util", "tests/samplers", "tests/models", "tests/losses",
    "tests/test_training_args.py", "tests/test_sentence_transformer.py",
    "tests/cross_encoder/test_cross_encoder.py",
]
# TRL's own tests of its utilities and trainers; its torch_device is Transformers'
# (TRANSFORMERS_TEST_DEVICE). Most load trl-internal-testing's tiny Hub models.
_TRL_CHECKOUT = [
    "tests/test_utils.py", "tests/test_data_utils.py", "tests/test_model_utils.py",
    "tests/test_activation_offloading.py", "tests/test_rewards.py",
    "tests/test_sft_trainer.py",
]
# diffusers' own model tests that build their models from a config (a Hub download fails on
# both runs, offline): the UNets and autoencoders Stable Diffusion and DDPM use.
_DIFFUSERS_CHECKOUT = [
    "tests/models/unets/test_models_unet_2d.py",
    "tests/models/unets/test_models_unet_2d_condition.py",
    "tests/models/autoencoders/test_models_autoencoder_kl.py",
    "tests/models/autoencoders/test_models_autoencoder_tiny.py",
]


@dataclass(frozen=True)
class Suite:
    """One host's suite: its sdist, test selections and device switches."""

    name: str
    distribution: str
    ci: list[str]
    full: list[str]
    # Extra pytest arguments of each subset (e.g. a -k selection).
    ci_args: list[str] = field(default_factory=list)
    full_args: list[str] = field(default_factory=list)
    # Environment of the hpu run beyond the emulator's switches.
    hpu_env: dict[str, str] = field(default_factory=dict)
    # The tests live in this repository and import the sdist (Transformers' mixins).
    own_tests: bool = False
    # The tests load small Hub checkpoints: give them the offline stand-ins.
    hub_stand_ins: bool = False
    # The sdist holds tests this suite uses (False: ours alone, the sdist is not fetched).
    sdist_tests: bool = True
    # The library's own tests in a checkout of its repository (`run <suite> --checkout PATH`),
    # for libraries whose sdist ships none: paths inside the checkout, extra pytest arguments,
    # and the hpu run's device switch. CI cannot fetch a repository (only PyPI is reachable):
    # a one-off local run, recorded in RESULTS.md.
    checkout_tests: list[str] = field(default_factory=list)
    checkout_args: list[str] = field(default_factory=list)
    checkout_hpu_env: dict[str, str] = field(default_factory=dict)
    # A test that fails on CPU and fails on hpu the same way (the same exception) is one the
    # host itself cannot run, not a difference (the model zoo: an architecture whose tiny
    # config does not build).
    same_failure_is_no_difference: bool = False


SUITES: dict[str, Suite] = {
    "accelerate": Suite(
        name="accelerate",
        distribution="accelerate",
        ci=_ACCELERATE_CORE,
        full=_ACCELERATE_CORE + _ACCELERATE_MORE,
        # test_infer_auto_device_map_on_t0pp reads bigscience/T0pp's config (no weights).
        hub_stand_ins=True,
    ),
    "peft": Suite(
        name="peft",
        distribution="peft",
        ci=_PEFT,
        full=_PEFT,
        ci_args=_PEFT_ARGS,
        full_args=_PEFT_ARGS,
        hub_stand_ins=True,
    ),
    "transformers": Suite(
        name="transformers",
        distribution="transformers",
        # CI and full: Llama, Qwen2 and BERT (ModelTesterMixin, generation, training).
        ci=[str(_TRANSFORMERS)],
        full=[str(_TRANSFORMERS)],
        hpu_env={"TRANSFORMERS_TEST_DEVICE": "hpu"},
        own_tests=True,
    ),
    "model-zoo": Suite(
        name="model-zoo",
        distribution="transformers",
        ci=[str(_MODEL_ZOO)],
        full=[str(_MODEL_ZOO)],
        ci_args=["-m", "not full"],
        own_tests=True,
        sdist_tests=False,
        same_failure_is_no_difference=True,
    ),
    "sentence-transformers": Suite(
        name="sentence-transformers",
        distribution="sentence-transformers",
        ci=[str(_LIBRARY_TESTS / "test_sentence_transformers.py")],
        full=[str(_LIBRARY_TESTS / "test_sentence_transformers.py")],
        own_tests=True,
        sdist_tests=False,
        checkout_tests=_SENTENCE_TRANSFORMERS_CHECKOUT,
        checkout_args=_CHECKOUT_ARGS,
    ),
    "trl": Suite(
        name="trl",
        distribution="trl",
        ci=[str(_LIBRARY_TESTS / "test_trl.py")],
        full=[str(_LIBRARY_TESTS / "test_trl.py")],
        ci_args=["-m", "not full"],
        # TRL 1.16 turns gradient checkpointing on by default; torch.utils.checkpoint enters
        # torch.hpu.device(...), whose exit in the Gaudi bridge calls set_device(-1) once
        # Accelerate has set device 0, which asserts when fewer than 8 modules are visible
        # (habana_frameworks/torch/hpu/__init__.py, device.__exit__ and set_device). Found by
        # this suite; the torch adapter answers it (hosts/torch_adapter.py). The hpu run is a
        # machine with one Gaudi, where the bridge's fault showed.
        hpu_env={"HPU_PLUGIN_EMULATE_DEVICES": "1"},
        own_tests=True,
        sdist_tests=False,
        checkout_tests=_TRL_CHECKOUT,
        checkout_args=_CHECKOUT_ARGS,
        checkout_hpu_env={"TRANSFORMERS_TEST_DEVICE": "hpu"},
    ),
    "diffusers": Suite(
        name="diffusers",
        distribution="diffusers",
        ci=[str(_LIBRARY_TESTS / "test_diffusers.py")],
        full=[str(_LIBRARY_TESTS / "test_diffusers.py")],
        ci_args=["-m", "not full"],
        own_tests=True,
        sdist_tests=False,
        checkout_tests=_DIFFUSERS_CHECKOUT,
        checkout_args=_CHECKOUT_ARGS,
        # diffusers' tests/testing_utils.py: torch_device is this variable when it is set.
        checkout_hpu_env={"DIFFUSERS_TEST_DEVICE": "hpu"},
    ),
}
