# Shape buckets on the oldest supported pair (transformers 4.51.3): the generate() adapter
# reaches into GenerationMixin internals (_prepare_cache_for_generation), so its
# version-sensitive test runs on both ends of the range (the newest in step 20). It reuses
# the oldest entry's environment, which step 30 created and built the emulator for.
set -euo pipefail
.nox/oldest/bin/pytest tests/shapes -k "llama or pipeline or test_plugin" -q -p no:cacheprovider
