"""One finding of a Gaudi rule: what ``hpu-plugin doctor`` prints, one line each.

The rules in this package return findings as well as raising ``GaudiConfigError``: raising
stops a job before it starts, a finding reports the same rule to a diagnostic that goes on
checking. It lives beside the rules (not in the diagnostics) so they can build one without
importing upwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning", "info", "ok"]


@dataclass(frozen=True)
class Finding:
    """One line of ``hpu-plugin doctor``: a rule, what it found, and what to do."""

    check: str
    severity: Severity
    message: str
    fix: str = ""
    variable: str = ""
    value: str | None = None

    def to_dict(self) -> dict[str, str | None]:
        return {
            "check": self.check,
            "severity": self.severity,
            "message": self.message,
            "fix": self.fix,
            "variable": self.variable,
            "value": self.value,
        }
