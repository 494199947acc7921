# The version matrix's oldest and middle entries (docs/version-matrix.md): the host adapters
# and the end-to-end tests on transformers 4.51.3 + accelerate 1.5.0 and on 4.57.6 + 1.10.1,
# each in its own .nox/<entry> environment, through the pinned nox of requirements/nox.txt.
# The two entries have separate environments, so they run side by side (one core each); their output
# is printed when both have ended. The newest entry is step 20.
set -euo pipefail
source .ci/steps/lib.bash
setup_venv .venv requirements/nox.txt
ENTRIES=(oldest middle)
mkdir -p .nox
pids=()
for entry in "${ENTRIES[@]}"; do
    .venv/bin/nox --non-interactive -s "$entry" > ".nox/$entry.log" 2>&1 &
    pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do
    wait "$pid" || failed=1
done
for entry in "${ENTRIES[@]}"; do
    echo "--- nox -s $entry"
    cat ".nox/$entry.log"
done
exit "$failed"
