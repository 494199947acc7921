"""torch: the pre-flight check runs through the new process group's store.

Right after ``init_process_group`` returns for an ``hccl`` job, and before anything can run a
collective, every rank publishes the facts the plugins report (``registry.job_facts``) under
a key of its own in the group's store and reads everybody else's, waiting at most
``HPU_PLUGIN_PREFLIGHT_TIMEOUT`` seconds; the comparison is :mod:`hpu_plugin.gaudi.preflight`.
A rank that never reports ends the job with an error naming it, instead of a hang in the
first collective.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
from typing import Any

from hpu_plugin.gaudi import preflight
from hpu_plugin.registry import Registry

log = logging.getLogger("hpu_plugin")
PREFIX = "hpu_plugin/preflight/"


def _gather(store: Any, rank: int, size: int, facts: dict[str, str], timeout: float) -> list[Any]:
    """Every rank's facts from the store, or a :class:`PreflightError` naming who is missing."""
    store.set(f"{PREFIX}{rank}", json.dumps(facts))
    keys = [f"{PREFIX}{r}" for r in range(size)]
    try:
        store.wait(keys, datetime.timedelta(seconds=timeout))
    except Exception as exc:  # the store's timeout error type differs across torch releases
        missing = [r for r, key in enumerate(keys) if not store.check([key])]
        raise preflight.PreflightError(
            preflight.TIMEOUT_VARIABLE,
            f"{timeout:g}",
            "every rank reporting within the timeout",
            "look for the rank that died or is stuck (its node's log), or raise "
            f"{preflight.TIMEOUT_VARIABLE} if nodes start slowly",
            problem=f"rank(s) {','.join(map(str, missing))} of {size} did not report to the "
            f"pre-flight check within {timeout:g} s ({type(exc).__name__})",
        ) from None
    return [json.loads(store.get(key)) for key in keys]


def check_process_group(registry: Registry) -> None:
    """Compare what every rank of the default process group sees; raise on a difference."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    size = dist.get_world_size()
    if size < 2:
        return
    get_store = getattr(distributed_c10d, "_get_default_store", None)
    if get_store is None:
        log.warning("hpu_plugin: no process-group store in this torch; pre-flight check skipped")
        return
    timeout = preflight.parse_timeout(os.environ)
    ranks = _gather(get_store(), dist.get_rank(), size, registry.job_facts(os.environ), timeout)
    for warning in preflight.compare(ranks):
        log.warning("hpu_plugin: %s", warning)
