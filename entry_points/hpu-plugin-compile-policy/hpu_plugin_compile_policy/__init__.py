"""Compile policy: rerouted ``torch.compile`` calls use ``eager``; every decision is logged.

A debugging policy. On Gaudi the first-party interceptor switches every ``torch.compile``
backend it cannot run to ``hpu_backend``. With this plugin installed those calls use
Dynamo's ``eager`` backend instead: the model is still traced, but no graph compiler
runs, which tells a graph-compiler fault from a tracing fault without editing the
program. Uninstalling is not needed to go back: ``HPU_PLUGIN_DISABLE=compile-policy``.

It is a ``wrapper=True`` implementation: it runs around every other implementation of
``hpu_compile_backend``, first-party included, sees their decision and may replace it.
Each decision is logged on the ``hpu_plugin_compile_policy`` logger and, when
``HPU_COMPILE_POLICY_LOG`` names a file, appended to it as one JSON line.

Kept cheap at import (the registry skips a plugin slower than its import budget): only
the standard library is imported here.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Generator
from typing import Any

from hpu_plugin.hookspecs import hookimpl

log = logging.getLogger("hpu_plugin_compile_policy")

#: What the first-party interceptor chooses for a backend Gaudi cannot run.
REROUTED = "hpu_backend"
#: What this policy uses instead.
POLICY_BACKEND = "eager"
LOG_VARIABLE = "HPU_COMPILE_POLICY_LOG"

Backend = str | Callable[..., Any]


def _name(backend: Backend | None) -> str | None:
    if backend is None or isinstance(backend, str):
        return backend
    return getattr(backend, "__name__", repr(backend))


@hookimpl(wrapper=True)
def hpu_compile_backend(
    requested: Backend | None
) -> Generator[None, Backend | None, Backend | None]:
    decided = yield  # what the other implementations chose (None: keep `requested`)
    final = POLICY_BACKEND if decided == REROUTED else decided
    record = {
        "hook": "hpu_compile_backend",
        "requested": _name(requested),
        "decided": _name(decided),
        "final": _name(final),
    }
    log.info("compile decision: %s", record)
    path = os.environ.get(LOG_VARIABLE)
    if path:
        with open(path, "a", encoding="utf-8") as stream:
            stream.write(json.dumps(record) + "\n")
    return final
