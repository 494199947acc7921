# The README's first command, as the README writes it, in a virtual environment of its own
# (.venv-demo): what requirements/demo.txt installs is enough for the demonstration, and the
# demonstration runs every section on the emulated Gaudi.
set -euo pipefail
command=$(awk '/^```bash$/ { getline; print; exit }' README.md)
case "$command" in
    *"requirements/demo.txt"*"examples/reference_page.py"*) ;;
    *) echo "the README's first command is not the demonstration: $command" >&2; exit 1 ;;
esac
rm -rf .venv-demo
out=$(bash -c "${command//.venv/.venv-demo}" 2>&1) || { echo "$out" | tail -40; exit 1; }
echo "$out" | grep -E "^(== |compiled train loss|model.device|pipeline device)"
for line in "model.device: hpu:0" "pipeline device: hpu:0" "compiled train loss:"; do
    grep -qF "$line" <<< "$out" || { echo "missing: $line" >&2; echo "$out" | tail -40; exit 1; }
done
echo "--- the demonstration's venv: $(du -sm .venv-demo | cut -f1) MB, $(.venv-demo/bin/python -m pip list 2>/dev/null | tail -n +3 | wc -l) packages"
