"""``python -m hpu_plugin.emulation build``: compile the emulator ahead of time.

Also ``path`` (print the cache directory this torch uses) and ``hl-smi`` (same as the module
``hpu_plugin.emulation.hlsmi``).
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpu_plugin.emulation")
    sub = parser.add_subparsers(dest="command", required=True)
    build_cmd = sub.add_parser("build", help="compile the C++ runtime into the cache now")
    build_cmd.add_argument("-v", "--verbose", action="store_true", help="show compiler output")
    sub.add_parser("path", help="print the build directory for the installed torch")
    args = parser.parse_args(argv)

    from hpu_plugin.emulation import build
    from hpu_plugin.emulation.errors import EmulationError

    if args.command == "path":
        print(build.build_dir())
        return 0
    try:
        build.load(verbose=args.verbose)
    except EmulationError as exc:
        print(f"hpu_plugin: {exc}", file=sys.stderr)
        return 1
    print(build.build_dir())
    return 0


if __name__ == "__main__":
    sys.exit(main())
