"""What the GPU Migration Toolkit's layer costs per call, on the emulator.

The toolkit (``PT_HPU_GPU_MIGRATION=1``) puts one Python function before ``Tensor.to``,
``Tensor.cuda`` and the factory functions, as the real one does; other ops are untouched.
Each measured call runs in fresh processes with the opt-in and without it, alternating; the
fastest run of each is compared (other processes only add time). Prints the ratios
(with / without) and the added microseconds per call.

    python bench/gpu_migration_overhead.py
"""

from __future__ import annotations

import os
import subprocess
import sys

CALLS = {
    "torch.zeros(64) on the CPU": "torch.zeros(64)",
    "torch.zeros(64, device='hpu')": "torch.zeros(64, device='hpu')",
    "cpu_tensor.to(torch.float32) (no-op)": "x.to(torch.float32)",
    "hpu_tensor.to('hpu') (no-op)": "h.to('hpu')",
    "a + b on the CPU (not wrapped)": "x + x",
}

CHILD = """
import sys, time, torch
x, h = torch.ones(64), torch.ones(64, device="hpu")
for name, code in {calls!r}.items():
    call = eval("lambda: " + code, {{"torch": torch, "x": x, "h": h}})
    best = float("inf")
    for _ in range(15):
        start = time.perf_counter()
        for _ in range(2000):
            call()
        best = min(best, (time.perf_counter() - start) / 2000 * 1e6)
    print(f"{{name}}\\t{{best:.3f}}")
"""


def _run(opt_in: bool) -> dict[str, float]:
    env = {**os.environ, "HPU_PLUGIN_EMULATE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("PT_HPU_GPU_MIGRATION", None)
    if opt_in:
        env["PT_HPU_GPU_MIGRATION"] = "1"
    done = subprocess.run([sys.executable, "-c", CHILD.format(calls=CALLS)], env=env,
                          capture_output=True, text=True, timeout=600, check=True)
    rows = (line.split("\t") for line in done.stdout.splitlines() if "\t" in line)
    return {name: float(value) for name, value in rows}


def main(rounds: int = 3) -> None:
    on: dict[str, float] = {}
    off: dict[str, float] = {}
    for _ in range(rounds):
        for opt_in, best in ((False, off), (True, on)):
            for name, value in _run(opt_in).items():
                best[name] = min(best.get(name, float("inf")), value)
    print(f"{'call':<40} {'off µs':>8} {'on µs':>8} {'ratio':>6} {'added µs':>9}")
    for name in CALLS:
        print(f"{name:<40} {off[name]:8.2f} {on[name]:8.2f} {on[name] / off[name]:6.2f} "
              f"{on[name] - off[name]:9.2f}")


if __name__ == "__main__":
    main()
