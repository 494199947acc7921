# Shape buckets on the oldest supported pair (transformers 4.51.3): the generate() adapter
# reaches into GenerationMixin internals (_prepare_cache_for_generation), so its
# version-sensitive test runs on both ends of the range (the newest in step 20).
set -euo pipefail
source .ci/steps/lib.bash
setup_venv .venv-oldest requirements/matrix/oldest.txt
.venv-oldest/bin/python -m hpu_plugin.emulation build
.venv-oldest/bin/pytest tests/shapes -k "llama or pipeline or test_plugin" -q
