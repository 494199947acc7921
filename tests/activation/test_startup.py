"""The interpreter-start ``.pth`` line: stand-ins findable early when emulating, else nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = """
import importlib.util, json, sys
spec = importlib.util.find_spec("habana_frameworks")
print(json.dumps({
    "found": spec is not None,
    "hpu_plugin_loaded": any(m == "hpu_plugin" or m.startswith("hpu_plugin.") for m in sys.modules),
    "torch_loaded": "torch" in sys.modules,
}))
"""


def _probe(**env: str) -> dict[str, bool]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("HPU_PLUGIN_")}
    environ.update(env)
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=environ, capture_output=True, text=True, timeout=60,
        check=True,
    )
    return json.loads(out.stdout)


def test_without_emulation_startup_imports_nothing_of_the_plugin() -> None:
    assert _probe() == {"found": False, "hpu_plugin_loaded": False, "torch_loaded": False}


def test_emulation_makes_habana_frameworks_findable_before_torch_is_imported() -> None:
    # Transformers and Accelerate call find_spec("habana_frameworks") before importing torch.
    result = _probe(HPU_PLUGIN_EMULATE="1")
    assert result["found"] is True
    assert result["torch_loaded"] is False


def test_emulation_switched_off_by_zero() -> None:
    assert _probe(HPU_PLUGIN_EMULATE="0")["found"] is False
