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


def extract(path: Path = SURFACE, only: tuple[str, ...] = ()) -> dict[str, object]:
    """Read the pinned releases and write the surface file. With ``only`` (distribution
    names), just those are read and every other consumer keeps its entry from the file, so a
    new pin does not download every other release again."""
    unknown = set(only) - {consumer.distribution for consumer in CONSUMERS}
    if unknown:
        raise ValueError(f"not pinned in consumer_surface/sources.py: {sorted(unknown)}")
    kept = json.loads(path.read_text(encoding="utf-8"))["consumers"] if only else {}
    consumers = {}
    for consumer in CONSUMERS:
        if only and consumer.distribution not in only:
            if consumer.key not in kept:
                raise ValueError(f"{consumer.key} is not in {path.name} yet: name it too")
            consumers[consumer.key] = kept[consumer.key]
        else:
            consumers[consumer.key] = consumer_names(consumer)
    surface = {
        "about": "Bridge names used by the pinned consumers' released code; "
                 "written by `python -m consumer_surface extract`, checked by "
                 "tests/emulation/test_consumer_surface.py.",
        "consumers": consumers,
    }
    path.write_text(json.dumps(surface, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    return surface
