# The whole suite on the newest supported hosts, on two workers (CI has two cores), then,
# alone, the tests that pip-install plugin distributions into this environment: while those
# are installed every process of the other tests would load them (tests/conftest.py).
# Most tests run programs in subprocesses, so two workers halve the step's time.
set -euo pipefail
.venv/bin/pytest -n 2 --durations=25 "$@"
.venv/bin/pytest --only-installs --durations=10 "$@"
