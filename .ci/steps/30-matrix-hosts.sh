# The version matrix's oldest and middle entries (docs/version-matrix.md): the host adapters
# and the end-to-end tests on transformers 4.51.3 + accelerate 1.5.0 and on 4.57.6 + 1.10.1,
# each in its own .nox/<entry> environment, through the pinned nox of requirements/nox.txt.
# The newest entry is step 20.
set -euo pipefail
source .ci/steps/lib.bash
setup_venv .venv requirements/nox.txt
.venv/bin/nox --non-interactive -s oldest middle
