"""HPU graphs as the Gaudi software has them, checked where the emulator models them, so
that the first real Gaudi proves (or refutes) the emulator's semantics:

- ``HPUGraph`` capture and replay: a replay recomputes from the static input's current
  values and writes into the tensor the capture returned (outputs live in the graph's memory);
- ``wrap_in_hpu_graph`` on a tiny Llama: logits within float32 matmul tolerance of the CPU's
  (relative L2 error, as ``numerics`` measures), the same output tensor for a repeated input
  shape, overwritten by the next call;
- the bridge's metrics: a new input shape compiles at least one graph, a replay none.

HPU graphs exist only in lazy mode (the bridge star-imports them only when ``is_lazy()``). This
check's own process runs in lazy mode when ``PT_HPU_LAZY_MODE`` is unset; a user's explicit
``0`` is kept, and the check then cannot run.
"""

from __future__ import annotations

import os
from typing import Any

from hpu_plugin.selftest import tiny
from hpu_plugin.selftest.harness import CannotRun, acquire, require, run

FP32_MATMUL = 5e-3  # relative L2 error, the numerics check's float32 matmul bound
_USER_MODE = os.environ.get("PT_HPU_LAZY_MODE")
if _USER_MODE is None:
    os.environ["PT_HPU_LAZY_MODE"] = "1"  # before torch loads the Gaudi software


def _compilations() -> Any:
    try:
        from habana_frameworks.torch.hpu.metrics import metric_global

        metric = metric_global("graph_compilation")
    except Exception:
        return None
    return metric


def _count(metric: Any) -> int | None:
    return None if metric is None else int(dict(metric.stats()).get("TotalNumber", 0))


def _capture_and_replay(torch: Any) -> None:
    static_x = torch.zeros(16, device="hpu")
    graph = torch.hpu.HPUGraph()
    with torch.hpu.graph(graph):
        out = static_x * 2 + 1
    for value in (1.0, 5.0):
        static_x.copy_(torch.full((16,), value, device="hpu"))
        graph.replay()
        got = out.cpu()
        require(torch.equal(got, torch.full((16,), 2 * value + 1)),
                f"HPUGraph replay with input {value} gave {got[:4].tolist()}, "
                f"expected {2 * value + 1}")


def body() -> tuple[str, dict[str, Any]]:
    if _USER_MODE is not None and _USER_MODE != "1":
        raise CannotRun(f"HPU graphs need lazy mode and PT_HPU_LAZY_MODE={_USER_MODE} is set")
    torch = acquire()
    if not hasattr(torch.hpu, "wrap_in_hpu_graph"):
        raise CannotRun("this Gaudi software offers no torch.hpu.wrap_in_hpu_graph in lazy mode")
    _capture_and_replay(torch)

    cpu = tiny.model()
    model = tiny.model()
    model = torch.hpu.wrap_in_hpu_graph(model.to("hpu"))
    metric = _compilations()
    generator = torch.Generator().manual_seed(0)
    vocab = cpu.config.vocab_size
    inputs = [torch.randint(3, vocab, (1, length), generator=generator) for length in (5, 5, 7, 5)]
    before = _count(metric)
    outputs, errors, counts = [], [], []
    with torch.no_grad():
        for ids in inputs:
            got = model(input_ids=ids.to("hpu"), use_cache=False).logits
            want = cpu(input_ids=ids, use_cache=False).logits
            host = got.float().cpu()
            errors.append(float((host - want).norm() / want.norm()))
            outputs.append(got)
            counts.append(_count(metric))
    worst = max(errors)
    require(worst <= FP32_MATMUL, f"logits in HPU graphs differ from the CPU's: {worst:.2e}")
    require(outputs[0] is outputs[1] is outputs[3],
            "a repeated input shape did not return the graph's own output tensor")
    require(outputs[2] is not outputs[0], "a new input shape reused another shape's graph")
    details: dict[str, Any] = {"max_rel_error": worst}
    if before is not None:
        new_shape = counts[2] - counts[1]
        replays = (counts[1] - counts[0]) + (counts[3] - counts[2])
        require(counts[0] - before >= 1, "capturing a graph counted no graph compilation")
        require(new_shape >= 1, "a new input shape counted no graph compilation")
        require(replays == 0, f"replaying captured graphs compiled {replays} graph(s)")
        details.update(first_capture=counts[0] - before, new_shape=new_shape, replays=replays)
    return f"capture, replay and wrap_in_hpu_graph agree (rel. error {worst:.1e})", details


if __name__ == "__main__":
    run("hpu-graphs", body)
