"""``hpu-plugin selftest`` refuses input it cannot honour before any check runs: a time
limit that is no bound, a report path that would block. Run with no Gaudi and no emulation,
so a refusal that came too late would show as the "no Gaudi here" message instead."""

from __future__ import annotations

import pytest
from processes import no_hlsmi_path, run_cli, scrubbed


def no_gaudi() -> dict[str, str]:
    return scrubbed(PATH=no_hlsmi_path())


@pytest.mark.parametrize("limit", ["inf", "-inf", "nan", "0", "-5", "Infinity"])
def test_a_time_limit_that_is_no_bound_is_refused_naming_the_option(limit):
    done = run_cli("selftest", f"--time-limit={limit}", env=no_gaudi(), timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--time-limit" in done.stderr and "finite number of seconds above 0" in done.stderr
    assert "no Gaudi here" not in done.stdout + done.stderr, done.stdout
