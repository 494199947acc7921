# The whole suite on the newest supported hosts.
set -euo pipefail
.venv/bin/pytest "$@"
