"""HPU graphs and lazy mode on the emulator: what they cost on the host, side by side.

1. A tiny Llama forward (batch 1, 16 tokens, no KV cache) run eagerly against the same
   forward replayed from ``wrap_in_hpu_graph``, in alternating blocks in one lazy-mode
   process; on Gaudi a replay saves host work, so the emulator's replay should cost no more
   than the eager forward. Target: replay / eager at most 1.0.
2. The lazy-mode graph trace (the C++ runtime hashes each op for ``mark_step``'s recipe
   cache): ``a + b`` on 4 elements with the trace on against off, alternating, one process.
   Reported in microseconds per op; no target.

    python bench/hpu_graphs.py
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("HPU_PLUGIN_EMULATE", "1")
os.environ["PT_HPU_LAZY_MODE"] = "1"
os.environ.setdefault("OMP_NUM_THREADS", "1")

TARGET = 1.0


def _per_call_ms(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e3


def _alternate(a: Callable[[], object], b: Callable[[], object], blocks: int,
               calls: int) -> tuple[list[float], list[float]]:
    ta, tb = [], []
    for i in range(blocks):
        first, second = (a, b) if i % 2 == 0 else (b, a)
        x = _per_call_ms(first, calls)
        y = _per_call_ms(second, calls)
        ta.append(x if first is a else y)
        tb.append(y if first is a else x)
    return ta, tb


def replay_against_eager(blocks: int = 11, calls: int = 20) -> None:
    import copy

    import torch

    from hpu_plugin.selftest import tiny

    eager = tiny.model().to("hpu")
    graphed = torch.hpu.wrap_in_hpu_graph(copy.deepcopy(eager))
    ids = torch.randint(3, eager.config.vocab_size, (1, 16)).to("hpu")
    with torch.no_grad():
        want = eager(input_ids=ids, use_cache=False).logits.cpu()
        got = graphed(input_ids=ids, use_cache=False).logits.cpu()
        assert torch.equal(want, got), "replay differs from eager"
        ta, tb = _alternate(lambda: eager(input_ids=ids, use_cache=False),
                            lambda: graphed(input_ids=ids, use_cache=False), blocks, calls)
    ratio = statistics.median(tb) / statistics.median(ta)
    verdict = "ok" if ratio <= TARGET else "OVER"
    print("tiny Llama forward, batch 1 x 16 tokens, lazy mode")
    print(f"  eager        {statistics.median(ta):8.2f} ms")
    print(f"  HPU graph    {statistics.median(tb):8.2f} ms (replay)")
    print(f"  ratio        {ratio:8.3f}   target <= {TARGET}: {verdict}  "
          f"(fastest blocks {min(tb) / min(ta):.3f})")


def lazy_trace_per_op(blocks: int = 11, calls: int = 5000) -> None:
    import torch

    from hpu_emulator import lazy, runtime

    a = torch.ones(4, device="hpu")
    b = torch.ones(4, device="hpu")
    ext = runtime.extension()

    def traced() -> None:
        ext.lazy_trace(True)
        for _ in range(calls):
            torch.add(a, b)
        lazy.discard_pending()

    def untraced() -> None:
        ext.lazy_trace(False)
        for _ in range(calls):
            torch.add(a, b)

    off, on = _alternate(untraced, traced, blocks, 1)
    ext.lazy_trace(True)
    per_op = (statistics.median(on) - statistics.median(off)) / calls * 1e3
    print("lazy-mode graph trace, a + b on 4 elements")
    print(f"  trace off    {statistics.median(off) / calls * 1e3:8.2f} us per op")
    print(f"  trace on     {statistics.median(on) / calls * 1e3:8.2f} us per op "
          f"(+{per_op:.2f} us)")


if __name__ == "__main__":
    replay_against_eager()
    lazy_trace_per_op()
