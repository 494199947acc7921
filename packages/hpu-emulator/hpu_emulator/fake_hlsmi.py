"""The emulator's fake ``hl-smi``: answers the query form the Gaudi tooling and docs use.

(The real tool's output is read by ``hpu_plugin.gaudi.hlsmi``.)
``python -m hpu_emulator.fake_hlsmi -Q index,module_id -f csv`` prints what the real
tool prints, through ``hpu_plugin.gaudi.hlsmi.format_csv`` (the formatter beside the parser the
plugin reads it with). Does not import torch.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from hpu_emulator import config as _config
from hpu_emulator.errors import EmulationError
from hpu_plugin.gaudi.hlsmi import format_csv, format_version

#: The Gaudi software release whose bridge the emulator follows; the emulated
#: ``habana-torch-plugin`` distribution (``standins/``) carries it too, with build number 0.
SOFTWARE_VERSION = "1.19.0"
DRIVER_VERSION = f"{SOFTWARE_VERSION}-emulated"
#: Invented: the emulator has no firmware (zeros, so that no one mistakes it for a real one).
FIRMWARE_VERSION = "0.0.0.0"
BUILT = "Jan 01 2025 - 00:00:00"
MIB = 1024 * 1024


def device_fields(srv: _config.Server, index: int) -> dict[str, str]:
    module = srv.modules[index]
    total = srv.memory // MIB
    return {
        "index": str(index),
        "module_id": str(module),
        "name": srv.gaudi.product,
        "bus_id": f"0000:{0x10 + 16 * module:02x}:00.0",
        "driver_version": DRIVER_VERSION,
        "serial": f"EMU{module:07d}",
        "uuid": f"01P0-HL{module:04d}-EMUL-ATED-0000{module:08d}",
        "memory.total": f"{total} MiB",
        "memory.used": "0 MiB",
        "memory.free": f"{total} MiB",
        "utilization.aip": "0 %",
        "power.draw": "0 W",
        "timestamp": "",
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hl-smi", description="hl-smi of the Gaudi emulator")
    parser.add_argument("-Q", "--query-aip", dest="query")
    parser.add_argument("-f", "--format", dest="format", default="csv")
    parser.add_argument("-L", "--list-aips", action="store_true")
    parser.add_argument("-v", "--version", action="store_true")
    args = parser.parse_args(argv)
    if not os.environ.get("HPU_PLUGIN_EMULATE", "").strip():
        os.environ["HPU_PLUGIN_EMULATE"] = "1"
    try:
        srv = _config.server()
    except EmulationError as exc:
        print(f"hl-smi: {exc}", file=sys.stderr)
        return 2
    if args.version:
        sys.stdout.write(format_version(SOFTWARE_VERSION, FIRMWARE_VERSION, BUILT))
        return 0
    indices = srv.container_indices
    if args.query:
        names = [name.strip() for name in args.query.split(",") if name.strip()]
        known = device_fields(srv, 0)
        unknown = [name for name in names if name not in known]
        if unknown:
            print(f'hl-smi: field "{unknown[0]}" is not a valid field to query', file=sys.stderr)
            return 2
        formats = {part.strip() for part in args.format.split(",")}
        if "csv" not in formats:
            print("hl-smi: only -f csv is supported by the emulator", file=sys.stderr)
            return 2
        rows = [device_fields(srv, index) for index in indices]
        sys.stdout.write(format_csv(rows, names, header="noheader" not in formats))
        return 0
    for index in indices:
        fields = device_fields(srv, index)
        print(f"AIP ({fields['name']}) {index}: module_id {fields['module_id']}, "
              f"bus_id {fields['bus_id']}, memory {fields['memory.total']}")
    return 0


#: An interpreter path the kernel can take from a ``#!`` line: absolute, no whitespace,
#: short enough for every kernel's limit (127 bytes on older Linux).
_SHEBANG_SAFE = re.compile(r"/[^\s]{1,120}")


def shim_text(executable: str = sys.executable) -> str:
    """The ``hl-smi`` shim that runs this module with ``executable``.

    A Python script with ``executable`` on its ``#!`` line: no shell reads the path, so a
    path containing ``$(...)``, quotes or backticks is a path, never a command. A path the
    ``#!`` line cannot hold (spaces, too long) gets a POSIX ``sh`` script in which the path
    is one single-quoted word (``shlex.quote``), which no shell expands either.
    """
    if _SHEBANG_SAFE.fullmatch(executable):
        return (
            f"#!{executable}\n"
            "# hl-smi of the hpu_plugin Gaudi emulator (HPU_PLUGIN_EMULATE)\n"
            "import sys\n\n"
            "from hpu_emulator.fake_hlsmi import main\n\n"
            "sys.exit(main())\n"
        )
    return (
        "#!/bin/sh\n"
        "# hl-smi of the hpu_plugin Gaudi emulator (HPU_PLUGIN_EMULATE)\n"
        f'exec {shlex.quote(executable)} -m hpu_emulator.fake_hlsmi "$@"\n'
    )


def install_shim() -> Path | None:
    """Put an ``hl-smi`` on PATH for this process and its children, unless a real one
    exists; its directory, or ``None`` when none was installed (the shim is a convenience:
    ``python -m hpu_emulator.fake_hlsmi`` always works)."""
    if shutil.which("hl-smi"):
        return None
    from hpu_emulator import trust
    from hpu_emulator.build import cache_root

    # one shim per interpreter: it runs this interpreter, which has hpu_plugin installed
    tag = hashlib.sha256(sys.executable.encode()).hexdigest()[:12]
    root = cache_root()
    directory = root / "bin" / tag
    shim = directory / "hl-smi"
    text = shim_text()
    trust.require(shim, root, "put on PATH")
    try:
        trust.make_dirs(directory)
        if not shim.exists() or shim.read_text() != text:
            tmp = directory / f".hl-smi.{os.getpid()}"
            trust.write_text(tmp, text, mode=0o755)
            os.chmod(tmp, 0o755)
            tmp.replace(shim)
    except (OSError, UnicodeError):
        return None
    from hpu_emulator.runtime import append_to_path

    append_to_path(str(directory), "hl-smi")
    return directory


if __name__ == "__main__":
    sys.exit(main())
