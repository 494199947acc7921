# Shared by the steps: setup_venv DIR REQUIREMENTS... creates DIR (once) and installs the
# requirements and this package (editable) into it, printing what it does.
setup_venv() {
    local dir=$1; shift
    local args=()
    for req in "$@"; do args+=(-r "$req"); done
    if [ ! -x "$dir/bin/python" ]; then
        echo "--- creating $dir"
        "${PY:-python3}" -m venv "$dir"
    fi
    echo "--- installing ${*} and hpu-plugin into $dir"
    "$dir/bin/python" -m pip install -q "${args[@]}" -e .
}
