"""Write surface.json: for each pinned consumer, each bridge name, how often and where first.

The file is data kept in the repository (like the peer suites' expectations): a review sees
a consumer's new release add or drop a name, and the test needs no network.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from consumer_surface.names import bridge_uses
from consumer_surface.sources import CONSUMERS, Consumer, python_files

SURFACE = Path(__file__).resolve().parent / "surface.json"


def consumer_names(consumer: Consumer) -> dict[str, dict[str, object]]:
    """name -> {"uses", "kinds", "first"} over every Python file of the release."""
    found: dict[str, dict[str, object]] = {}
    for path, source in python_files(consumer):
        try:
            uses = bridge_uses(source)
        except SyntaxError as error:  # a template or a py2 leftover: said, not hidden
            print(f"consumer_surface: {consumer.key} {path}: {error}", file=sys.stderr)
            continue
        for use in uses:
            entry = found.setdefault(
                use.name, {"uses": 0, "kinds": [], "first": f"{path}:{use.line}"})
            entry["uses"] = int(entry["uses"]) + 1  # type: ignore[call-overload]
            kinds = entry["kinds"]
            assert isinstance(kinds, list)
            if use.kind not in kinds:
                kinds.append(use.kind)
    return dict(sorted(found.items()))


def extract(path: Path = SURFACE) -> dict[str, object]:
    """Read every pinned release and write the surface file."""
    surface = {
        "about": "Bridge names used by the pinned consumers' released code; "
                 "written by `python -m consumer_surface extract`, checked by "
                 "tests/emulation/test_consumer_surface.py.",
        "consumers": {consumer.key: consumer_names(consumer) for consumer in CONSUMERS},
    }
    path.write_text(json.dumps(surface, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    return surface
