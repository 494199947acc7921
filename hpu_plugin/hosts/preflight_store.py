"""torch: the pre-flight check runs through the process group's store.

When ``init_process_group`` starts an ``hccl`` job, before the group exists and so before
anything can run a collective, every rank publishes the facts the plugins report
(``registry.job_facts``) under a key of its own in the group's store and reads everybody
else's, waiting at most
``HPU_PLUGIN_PREFLIGHT_TIMEOUT`` seconds; the comparison is :mod:`hpu_plugin.gaudi.preflight`.
A rank that never reports ends the job with an error naming it, instead of a hang in the
first collective.
"""

from __future__ import annotations

import datetime
import inspect
import json
import logging
import os
from collections.abc import Callable
from typing import Any

from hpu_plugin.gaudi import preflight
from hpu_plugin.registry import Registry

log = logging.getLogger("hpu_plugin")
PREFIX = "rank/"


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


def init_with_preflight(
    registry: Registry, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``init_process_group`` for an ``hccl`` job, with the pre-flight check first.

    The check must come before the group is built: a process group's constructor may wait
    for every rank (the pg timeout, 30 minutes by default), so a rank that died before it
    would hang the others there. So the store is made here exactly as ``init_process_group``
    makes it (``rendezvous`` of the same ``init_method``, rank and world size, the same
    timeout), the ranks compare their facts through it within ``HPU_PLUGIN_PREFLIGHT_TIMEOUT``,
    and the group is then built on that store: the call the user made, with its rendezvous
    done once instead of twice.
    """
    import torch.distributed as dist

    try:
        bound = inspect.signature(original).bind(*args, **kwargs)
    except TypeError:
        return original(*args, **kwargs)  # let torch report the wrong call in its own words
    given = bound.arguments
    if given.get("store") is not None or not hasattr(dist, "rendezvous"):
        store, rank, size = given.get("store"), given.get("rank", -1), given.get("world_size", -1)
    else:
        timeout = given.get("timeout") or _default_timeout()
        init_method = given.pop("init_method", None) or "env://"
        store, rank, size = next(
            dist.rendezvous(init_method, given.get("rank", -1), given.get("world_size", -1),
                            timeout=timeout)
        )
        store.set_timeout(timeout)
        given.update(store=store, rank=rank, world_size=size)
    if store is not None and size > 1:
        check_ranks(registry, store, rank, size)
    return original(*bound.args, **bound.kwargs)


def _default_timeout() -> datetime.timedelta:
    from torch.distributed import constants

    return constants.default_pg_timeout


def check_ranks(registry: Registry, store: Any, rank: int, size: int) -> None:
    """Compare what every rank sees; raise on a difference or a missing rank."""
    import torch.distributed as dist

    timeout = preflight.parse_timeout(os.environ)
    shared = dist.PrefixStore("hpu_plugin_preflight", store)
    ranks = _gather(shared, rank, size, registry.job_facts(os.environ), timeout)
    for warning in preflight.compare(ranks):
        log.warning("hpu_plugin: %s", warning)
