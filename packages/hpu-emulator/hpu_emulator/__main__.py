"""``python -m hpu_emulator build``: compile the emulator ahead of time.

Also ``path`` (print the build directory for the installed torch) and ``clean`` (delete
every other cached build: each torch version and each emulator source change has its own).
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpu_emulator")
    sub = parser.add_subparsers(dest="command", required=True)
    build_cmd = sub.add_parser("build", help="compile the C++ runtime into the cache now (also "
                               "retries a build that failed: processes that emulate do not)")
    build_cmd.add_argument("-v", "--verbose", action="store_true", help="show compiler output")
    build_cmd.add_argument("--force", action="store_true",
                           help="rebuild even when the cached build is sound")
    sub.add_parser("path", help="print the build directory for the installed torch")
    sub.add_parser("clean", help="delete cached builds other than this torch's current one")
    args = parser.parse_args(argv)

    from hpu_emulator import build
    from hpu_emulator.errors import EmulationError

    if args.command == "path":
        print(build.build_dir())
        return 0
    if args.command == "clean":
        import shutil

        keep = build.build_dir()
        root = build.cache_root()
        for entry in sorted(root.glob("*")) if root.is_dir() else []:
            if entry.name in (keep.name, f"{keep.name}.lock", "bin"):
                continue
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            print(f"removed {entry}")
        return 0
    try:
        if args.force:
            build.rebuild(verbose=args.verbose)
        else:
            build.load(verbose=args.verbose, retry=True)
    except EmulationError as exc:
        print(f"hpu_plugin: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("hpu_plugin: interrupted; the build was stopped and left nothing behind",
              file=sys.stderr)
        return 130
    print(build.build_dir())
    return 0


if __name__ == "__main__":
    sys.exit(main())
