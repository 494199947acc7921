"""Static shapes on Gaudi: why sizes are bucketed, and the default buckets.

Every new input shape of a graph compiled with ``hpu_backend`` costs a Synapse graph
compilation (a recipe; seconds each on hardware), cached per concrete shape. The Gaudi
serving stacks (vLLM-Gaudi, TGI-Gaudi, optimum-habana) therefore pad the sizes that vary —
prompt length, batch size, key-value cache length — up to a few buckets. Their layout is the
one used here: an exponential ramp for small sizes (where a linear step would waste most of
the work on padding), then a linear step (where a doubling would), as vLLM-Gaudi's
``*_BUCKET_MIN``/``_STEP``/``_MAX`` settings describe. Lengths step by 128: Gaudi's matrix
engine works on 128-wide tiles (Gaudi2/3 MME), so a padded length of a multiple of 128 costs
no more than the real one in the matrix engine.
"""

from __future__ import annotations

from dataclasses import dataclass

#: What a host may ask buckets for.
KINDS = ("length", "batch", "cache")


@dataclass(frozen=True)
class BucketRule:
    """Doubling from ``minimum`` up to ``step``, then ``step`` by ``step`` up to ``maximum``."""

    minimum: int
    step: int
    maximum: int
    doubling: bool = False  # keep doubling past ``step`` (cache lengths: few, large buckets)

    def sizes(self, limit: int | None = None) -> tuple[int, ...]:
        top = self.maximum if limit is None else max(1, min(limit, self.maximum))
        out: list[int] = []
        size = self.minimum
        while size < top:
            out.append(size)
            size = size * 2 if (self.doubling or size < self.step) else size + self.step
        out.append(top)
        return tuple(out)


#: Prompt / training-batch length: 64, 128, 256, then every 128 (5 buckets up to 512).
LENGTH = BucketRule(minimum=64, step=128, maximum=8192)
#: Sequences generated together: 1, 2, 4, ... 32, then every 32.
BATCH = BucketRule(minimum=1, step=32, maximum=256)
#: Static key-value cache length (prompt + new tokens): 512, 1024, 2048, ... Decoding runs
#: one graph per cache length, so few large buckets; attention over the masked tail of the
#: cache is cheap next to a compilation.
CACHE = BucketRule(minimum=512, step=512, maximum=131072, doubling=True)

DEFAULTS = {"length": LENGTH, "batch": BATCH, "cache": CACHE}


def default_buckets(kind: str, limit: int | None) -> tuple[int, ...]:
    """The default buckets of ``kind``, the last one capped at ``limit`` when given."""
    return DEFAULTS[kind].sizes(limit)


def bucket_for(size: int, buckets: tuple[int, ...]) -> int:
    """The smallest bucket at least ``size``; ``size`` itself above the last bucket."""
    for bucket in buckets:
        if bucket >= size:
            return bucket
    return size
