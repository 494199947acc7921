"""The backend warning names the user's file and line; a library's own ``@torch.compile``
at import (bitsandbytes) is logged at debug and counted, not warned about."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from processes import emulated, run

pytestmark = pytest.mark.e2e


def test_warning_names_the_callers_line_and_skips_library_import_time(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""\
        import json
        import bitsandbytes  # decorates its own ops with @torch.compile while imported
        import torch

        from hpu_plugin.diagnostics.info import collect_info

        def double(x):
            return x * 2

        compiled = torch.compile(double)
        print(json.dumps(collect_info()["import_time_compiles"]))
    """))
    done = run([sys.executable, str(script)], emulated(), timeout=300)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "torch.compile backend" in line]
    assert len(warnings) == 1, done.stderr
    assert f"at {script}:10 " in warnings[0], warnings
    assert "bitsandbytes" not in done.stderr, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) >= 1, done.stdout
