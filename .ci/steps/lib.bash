# Shared by the steps: setup_venv DIR REQUIREMENTS... creates DIR (once) and installs the
# requirements, this package and the emulator (both editable, in one pip command) into it,
# printing what it does.
setup_venv() {
    local dir=$1; shift
    local args=()
    for req in "$@"; do args+=(-r "$req"); done
    if [ ! -x "$dir/bin/python" ]; then
        echo "--- creating $dir"
        "${PY:-python3}" -m venv "$dir"
    fi
    echo "--- installing ${*}, hpu-plugin and hpu-emulator into $dir"
    "$dir/bin/python" -m pip install -q "${args[@]}" -e . -e packages/hpu-emulator
}
