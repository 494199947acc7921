"""The host releases the adapters were written for, and the one way a version is read.

Transformers has HPU code from 4.51 and turns HPU off below Accelerate 1.5.0 (the first
Accelerate with HPU code): the adapters act on these bounds and ``hpu-plugin doctor``
reports them, from this one table.
"""

from __future__ import annotations

import re

#: The first release of each host with HPU code.
MINIMUM: dict[str, tuple[int, ...]] = {"transformers": (4, 51), "accelerate": (1, 5, 0)}

_RELEASE = re.compile(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?")


def release(version: str) -> tuple[int, ...]:
    """``"4.51.3"`` -> ``(4, 51, 3)``; pre-release and local parts are ignored; ``()`` if
    the text does not start with a number."""
    match = _RELEASE.match(version.strip())
    if match is None:
        return ()
    return tuple(int(part) for part in match.groups() if part is not None)


def text(release_: tuple[int, ...]) -> str:
    return ".".join(map(str, release_))
