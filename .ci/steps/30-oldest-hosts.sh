# The oldest supported pair, transformers 4.51.3 + accelerate 1.5.0: the host adapters and
# the end-to-end tests of the reference page.
set -euo pipefail
source .ci/steps/lib.bash
setup_venv .venv-oldest requirements/oldest.txt
.venv-oldest/bin/python -m hpu_plugin.emulation build
.venv-oldest/bin/pytest tests/hosts tests/e2e
