"""``python -m consumer_surface extract|resolve|report`` (consumer_surface/README.md).

extract [DISTRIBUTION...]: read the pinned releases (downloaded with pip into a cache) and
rewrite surface.json; with names, read only those and keep the other entries. resolve:
print, as JSON, why each name is missing (null when present) in this process; run it with
``HPU_PLUGIN_EMULATE=1``. report: run resolve on the emulator and print the share of names
present, per consumer. Both run in lazy mode, the bridge's default (``PT_HPU_LAZY_MODE``
unset is 1 there), in which it offers its HPU-graph API.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from consumer_surface.coverage import LEFT_OUT, SURFACE, load, resolve, tallies


def _resolve_all() -> dict[str, str | None]:
    import torch  # noqa: F401  (activation: the emulated bridge appears with torch)

    surface = load(SURFACE)
    names = sorted(set().union(*(set(found) for found in surface["consumers"].values())))
    return {name: resolve(name) for name in names}


def _report() -> int:
    env = {**os.environ, "HPU_PLUGIN_EMULATE": "1", "PT_HPU_LAZY_MODE": "1"}
    done = subprocess.run([sys.executable, "-m", "consumer_surface", "resolve"], env=env,
                          capture_output=True, text=True, check=True)
    errors = json.loads(done.stdout)
    left_out = load(LEFT_OUT)
    every = tallies(errors, load(SURFACE), left_out)
    for key, found in every.items():
        print(f"{key:32} {found.present:3}/{found.total:<3} {found.share:6.1%}")
    for name in every["all"].missing:
        listed = "listed" if name in left_out["missing"] else "NOT LISTED"
        print(f"missing ({listed}): {name}: {errors[name]}")
    return 0


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "report"
    if command == "extract":
        from consumer_surface.extract import extract

        extract(only=tuple(argv[1:]))
        return 0
    if command == "resolve":
        print(json.dumps(_resolve_all(), indent=1))
        return 0
    if command == "report":
        return _report()
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
