"""Graph compilations of a short compiled generation, read from the Gaudi software's metrics
API (``habana_frameworks.torch.hpu.metrics.metric_global("graph_compilation")``).

What is checked is what must hold on any Gaudi: the counter is readable and counts the
first generation's compilations, and repeating the same generation, with the same shapes,
compiles nothing more (every graph is found in the cache). The first count is reported: it
is what a user tunes with static shapes or bucketing.

The forward is compiled with ``dynamic=False`` (one graph per shape, as Gaudi's guidance for
generation has it), so the count does not depend on when dynamo switches to dynamic shapes.
"""

from __future__ import annotations

import os
from typing import Any

from hpu_plugin.gaudi.environment import RECIPE_CACHE, RECIPE_CACHE_PATH
from hpu_plugin.selftest import tiny
from hpu_plugin.selftest.harness import CannotRun, acquire, require, run

NEW_TOKENS = 3


def _metric() -> Any:
    try:
        from habana_frameworks.torch.hpu.metrics import metric_global

        metric = metric_global("graph_compilation")
    except Exception as exc:  # absent in this Gaudi software: nothing to read
        raise CannotRun(
            "the Gaudi software has no habana_frameworks.torch.hpu.metrics."
            f"metric_global('graph_compilation'): {type(exc).__name__}: {exc}"
        ) from exc
    return metric


def _recipes_on_disk() -> bool:
    """Whether the recipe cache on disk already holds recipes (an earlier run's, in the
    user's own cache): the first generation may then read them instead of compiling."""
    raw = os.environ.get(RECIPE_CACHE)
    path = raw.split(",")[0].strip() if raw is not None else os.environ.get(RECIPE_CACHE_PATH, "")
    return bool(path) and os.path.isdir(path) and bool(os.listdir(path))


def _count(metric: Any) -> int:
    stats = dict(metric.stats())
    require("TotalNumber" in stats, f"graph_compilation stats lack TotalNumber: {stats}")
    return int(stats["TotalNumber"])


def body() -> tuple[str, dict[str, Any]]:
    torch = acquire()
    metric = _metric()
    model = tiny.model().to("hpu")
    model.forward = torch.compile(model.forward, dynamic=False)
    ids = torch.tensor([[1, 3, 4, 5, 6]], device="hpu")

    def generate() -> Any:
        with torch.no_grad():
            return model.generate(
                ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS, do_sample=False,
            )

    warm = _recipes_on_disk()
    before = _count(metric)
    first = generate()
    after_first = _count(metric)
    second = generate()
    after_second = _count(metric)
    compiled = after_first - before
    again = after_second - after_first
    require(compiled >= 1 or warm, "the compiled generation counted no graph compilation")
    require(
        again == 0,
        f"repeating the same generation compiled {again} more graph(s): the cache missed",
    )
    require(torch.equal(first.cpu(), second.cpu()), "the same generation gave other tokens")
    return (
        f"{compiled} compilation(s) for {NEW_TOKENS} tokens, 0 on repeat",
        {"first_generation": compiled, "repeat": again, "new_tokens": NEW_TOKENS},
    )


if __name__ == "__main__":
    run("graph-compilations", body)
