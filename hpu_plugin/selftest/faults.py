"""Fault injection for testing the selftest itself: ``HPU_PLUGIN_SELFTEST_FAULT``.

Test-only, documented in docs/selftest.md. The runner and the checks are the real ones; the
variable makes a named check misbehave inside its own process, so that what the user would
see when a check hangs, fails, crashes or meets a busy module is exercised end to end:

``hang:CHECK``   the check's process (and a child it starts) sleeps until it is killed
``fail:CHECK``   the check reports a failure
``crash:CHECK``  the check's process aborts without a verdict
``busy:MODULE``  acquiring Gaudi module MODULE fails as when another process holds it

Items are separated by commas, e.g. ``hang:numerics,busy:0``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping

VARIABLE = "HPU_PLUGIN_SELFTEST_FAULT"
KINDS = ("hang", "fail", "crash", "busy")


class FaultSpecError(ValueError):
    """The variable's value cannot be read; the message names it and the accepted form."""


def parse(environ: Mapping[str, str] = os.environ) -> list[tuple[str, str]]:
    """The (kind, target) pairs asked for; an unreadable value is an error, never ignored."""
    raw = environ.get(VARIABLE, "").strip()
    faults = []
    for item in filter(None, (part.strip() for part in raw.split(","))):
        kind, _, target = item.partition(":")
        if kind not in KINDS or not target:
            raise FaultSpecError(
                f"{VARIABLE}={raw!r}: item {item!r} is not KIND:TARGET with KIND one of "
                f"{', '.join(KINDS)} (e.g. hang:numerics or busy:0); unset it for no faults"
            )
        faults.append((kind, target))
    return faults


def busy_modules(environ: Mapping[str, str] = os.environ) -> set[str]:
    """Module ids to treat as held by another process."""
    return {target for kind, target in parse(environ) if kind == "busy"}


def apply(check: str, environ: Mapping[str, str] = os.environ) -> None:
    """Misbehave as asked for ``check``; called by the check's process before its body."""
    kinds = {kind for kind, target in parse(environ) if target == check}
    if "crash" in kinds:
        sys.stdout.flush()
        os.abort()
    if "hang" in kinds:
        # A child too: the runner must end the check's whole process group, not one process.
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        print(f"injected fault: {check} hangs", flush=True)
        while True:
            time.sleep(60)
    if "fail" in kinds:
        raise InjectedFailure(f"injected fault: {check} fails ({VARIABLE})")


class InjectedFailure(AssertionError):
    """The failure ``fail:CHECK`` asks for; reported like any failed assertion of a check."""
