"""Added time of ``import torch`` with hpu-plugin installed and no Gaudi.

Two measurements, in fresh interpreters:

1. What the plugin adds inside ``import torch``: loading and calling its ``torch.backends``
   entry point, timed in a process where torch was imported with autoload off. This is
   the whole difference against a venv without the package (torch scans the entry-point
   group in both), measured without the noise of a 2-second import.
2. Paired whole ``import torch`` runs, with the entry point on (the default) and off
   (``TORCH_DEVICE_BACKEND_AUTOLOAD=0``), alternating; on a shared machine the spread
   of one import is far above 3 ms, so this is a sanity check, not the verdict.

    python bench/import_overhead.py [pairs]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

CHILD = (
    "import time; t = time.perf_counter(); import torch; "
    "print((time.perf_counter() - t) * 1e3)"
)
#: The plugin's own time inside ``import torch`` on a machine without Gaudi: loading one
#: small module (the package root, whose ``autoload`` answers this case), two environment
#: look-ups and one ``find_spec``.
BUDGET_MS = 0.5
ENTRY_POINT = """
import time
import torch  # autoload off: the plugin has not run
from importlib.metadata import entry_points
(ep,) = [e for e in entry_points(group="torch.backends") if e.value.startswith("hpu_plugin")]
t = time.perf_counter()
ep.load()()
print((time.perf_counter() - t) * 1e3)
"""
LOADED = (
    "import sys, torch; "
    "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] == 'hpu_plugin')))"
)


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HPU_PLUGIN_", "TORCH_DEVICE_BACKEND_AUTOLOAD"))}
    # Installed packages run from cached bytecode; with PYTHONDONTWRITEBYTECODE set (some
    # sandboxes and CI images do) every run would compile the plugin's sources instead and
    # measure the compiler (about 3 ms), not the plugin.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(extra)
    return env


def once(env: dict[str, str], child: str = CHILD) -> float:
    out = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True,
                         text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 21
    on, off = _clean_env(), _clean_env(TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    once(on), once(off)  # warm the page cache
    own = [once(off, ENTRY_POINT) for _ in range(pairs)]
    own_ms = statistics.median(own)
    with_plugin, without, diffs = [], [], []
    for i in range(pairs):
        if i % 2:
            b, a = once(off), once(on)
        else:
            a, b = once(on), once(off)
        with_plugin.append(a)
        without.append(b)
        diffs.append(a - b)
    added = statistics.median(diffs)
    print(f"no Gaudi, no emulation, {pairs} fresh processes each")
    loaded = subprocess.run([sys.executable, "-c", LOADED], env=on, capture_output=True,
                            text=True, check=True).stdout.split()
    print(f"  modules of the plugin loaded by import torch: {len(loaded)} ({', '.join(loaded)})")
    print(f"  plugin's own time inside import torch: median {own_ms:.3f} ms, "
          f"min {min(own):.3f} ms, max {max(own):.3f} ms  (budget {BUDGET_MS} ms: "
          f"{'ok' if own_ms <= BUDGET_MS else 'OVER'})")
    print("whole import torch, paired runs (noisy on a shared machine)")
    print(f"  with plugin     median {statistics.median(with_plugin):8.1f} ms")
    print(f"  without plugin  median {statistics.median(without):8.1f} ms")
    ratio = statistics.median(with_plugin) / statistics.median(without)
    print(f"  ratio (medians)        {ratio:8.3f}")
    print(f"  added (median of paired differences) {added:+.2f} ms  ")


if __name__ == "__main__":
    main()
