# The newest supported hosts: install, lint, and compile the emulator's C++ runtime once,
# up front, so a build failure is reported as such.
set -euo pipefail
source .ci/steps/lib.bash
setup_venv .venv requirements/test.txt
.venv/bin/ruff check .
.venv/bin/python -m hpu_emulator build
