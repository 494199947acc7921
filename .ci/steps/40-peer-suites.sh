# The hosts' own test suites on CPU and on the emulated hpu, compared test by test with
# peer_suites/expectations.json (docs/peer-suites.md): Accelerate's ten core files, PEFT's
# QLoRA accelerator tests and a LoRA slice of its custom-model tests, and Transformers'
# common mixins on Llama, Qwen2 and BERT, and the project's tests of sentence-transformers,
# TRL and diffusers (their sdists ship none; about 2 min more). Its own
# venv, because the suites need test-only packages (torchdata, datasets, diffusers, ...).
# The sdists are fetched with pip into ~/.cache/hpu_plugin/peer, never into the repository.
# The larger run (five more Accelerate files) is `python -m peer_suites run --subset full`;
# its last results are in peer_suites/RESULTS.md.
set -euo pipefail
source .ci/steps/lib.bash
setup_venv .venv-peer requirements/peer.txt
.venv-peer/bin/python -m hpu_emulator build
.venv-peer/bin/python -m peer_suites run --subset ci
