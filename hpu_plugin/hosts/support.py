"""Which torch, Transformers and Accelerate releases are tested: the facts the adapters and
the diagnostics share (where the installed releases stand is ``diagnostics.host_releases``).

:data:`MATRIX` is the one home of the tested releases in the package. Each entry is one run
of the version matrix (``noxfile.py``, one pinned file ``requirements/matrix/<name>.txt``
per entry); ``tests/hosts/test_support.py`` checks the two against each other, so they
cannot drift. The supported range of each host is exactly the span of its tested releases:
nothing outside it has been run. A release inside the span that no entry pins is "in range,
untested": the adapters look for the same decision points there, but nobody has watched
them do it.

This module imports nothing (no host, nothing of the package), so ``hpu-plugin info`` can
classify without importing torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HOSTS = ("torch", "transformers", "accelerate")


@dataclass(frozen=True)
class MatrixEntry:
    """One run of the version matrix: the tests of the host adapters and the end-to-end
    reference page, on these exact releases."""

    name: str
    torch: str
    transformers: str
    accelerate: str
    why: str

    def version(self, host: str) -> str:
        return str(getattr(self, host))


#: The version matrix (docs/version-matrix.md says how it runs and what it last measured).
MATRIX: tuple[MatrixEntry, ...] = (
    MatrixEntry(
        "gaudi-1.23", "2.9.0", "4.55.4", "1.10.1",
        "the torch of Intel Gaudi software 1.23 with the hosts of its optimum-habana (1.20.0); "
        "PyPI's CUDA build of torch, run on a CPU",
    ),
    MatrixEntry(
        "gaudi-1.24.0", "2.10.0", "4.55.4", "1.10.1",
        "the torch of Intel Gaudi software 1.24.0 with the hosts its support matrix names; "
        "PyPI's CUDA build of torch, run on a CPU",
    ),
    MatrixEntry(
        "gaudi-1.24.1", "2.11.0", "5.24.0", "1.15.0",
        "the torch of Intel Gaudi software 1.24.1 with the newest hosts; PyPI's CUDA build "
        "of torch, run on a CPU",
    ),
    MatrixEntry(
        "oldest", "2.13.0", "4.51.3", "1.5.0",
        "the first releases with HPU code; below them the adapters have nothing to route",
    ),
    MatrixEntry(
        "middle", "2.13.0", "4.57.6", "1.10.1",
        "the last 4.x Transformers: 4.55's own HPU torch.compile wrapper and bf16 check, "
        "4.57's bitsandbytes placement path, still 4.x's `transformers env`; Accelerate "
        "1.10's multi-HPU config and accelerator-based device type",
    ),
    MatrixEntry(
        "newest", "2.13.0", "5.24.0", "1.15.0",
        "the newest releases; the whole suite runs on them",
    ),
)

#: PEFT releases the PEFT adapter (``peft_adapter``: ``infer_device`` names hpu) was read and
#: tested on: requirements/test.txt and requirements/peer.txt pin the last one. PEFT is not
#: a host of the matrix (it runs on the newest entry's Transformers and Accelerate); on any
#: other release the adapter stays out and says so.
PEFT_TESTED = ("0.21.2",)

#: The libraries optimum-habana used to cover, tested on the newest matrix entry
#: (requirements/test.txt and requirements/peer.txt pin them; their own test suites run in
#: ``peer_suites``). sentence-transformers has an adapter (``sentence_transformers_adapter``:
#: its optimum branch and its multi-process pool), which stays out of any other release; TRL
#: and diffusers need none (they reach Gaudi through Transformers, Accelerate and torch).
SENTENCE_TRANSFORMERS_TESTED = ("6.2.0",)
TRL_TESTED = ("1.16.0",)
DIFFUSERS_TESTED = ("0.42.1",)
#: distribution -> its tested releases, for ``hpu-plugin info`` and ``doctor``.
LIBRARIES_TESTED = {
    "peft": PEFT_TESTED,
    "sentence-transformers": SENTENCE_TRANSFORMERS_TESTED,
    "trl": TRL_TESTED,
    "diffusers": DIFFUSERS_TESTED,
}

#: Below these, the hosts have no HPU code at all: the adapters stay out of them.
HPU_CODE_SINCE = {"transformers": "4.51", "accelerate": "1.5.0"}

#: The first Gaudi bridge (``habana-torch-plugin``) release read whose ``torch.hpu.device``
#: exit selects a device its enter did not (``set_device(-1)`` with no module id): 1.19.0,
#: the release the bridge's public repository publishes. No later release has been read
#: without the fault, so the torch adapter adapts every release from this one on.
BRIDGE_DEVICE_EXIT_FAULT_SINCE = "1.19.0"

_VERSION = re.compile(
    r"^\s*v?(?P<release>\d+(?:\.\d+)*)"
    r"(?P<suffix>(?:[-_.]?(?:a|b|rc|alpha|beta|c|pre|preview|dev|post)[-_.]?\d*)*)"
    r"(?:\+[\w.]+)?\s*$",
    re.IGNORECASE,
)


def release_key(version: str) -> tuple[tuple[int, ...], int] | None:
    """An ordering key for a version string, or None if it cannot be read.

    The local label (``+cpu``, ``+cu130``) names a build of a release, not another release,
    and is ignored. A pre-release or dev build comes before its release, a post-release after
    it; neither is the tested release itself. Trailing zeros do not count (2.14 == 2.14.0).
    """
    match = _VERSION.match(version)
    if match is None:
        return None
    parts = [int(part) for part in match["release"].split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    suffix = match["suffix"].lower()
    if not suffix:
        phase = 0
    elif "post" in suffix and not re.search(r"a|b|c|dev|pre", suffix.replace("post", "")):
        phase = 1
    else:
        phase = -1
    return tuple(parts), phase


def tested_releases(host: str) -> list[str]:
    """The releases of ``host`` the matrix runs, oldest first."""
    versions = {entry.version(host) for entry in MATRIX}
    return sorted(versions, key=lambda v: release_key(v) or ((), 0))
