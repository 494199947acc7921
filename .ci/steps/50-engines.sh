# The distributed engines (docs/scaling-out.md): two emulated nodes under torchrun,
# DeepSpeed ZeRO against DDP, Ray Train. Their dependencies (deepspeed, ray) live in their
# own venv so they cannot change what the main suite sees. The slowest engine tests
# (engines_full) run from the long-run command in docs/scaling-out.md.
set -euo pipefail
source .ci/steps/lib.bash
DS_BUILD_OPS=0 setup_venv .venv-engines requirements/engines.txt
.venv-engines/bin/python -m hpu_emulator build
.venv-engines/bin/pytest tests_engines -m "not engines_full" -q -p no:cacheprovider
