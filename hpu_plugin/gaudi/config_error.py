"""The one error type of the Gaudi rules (its findings are in ``findings``).

Every rule names four things, because a user who meets the message must be able to act on
it without reading our code: the input at fault (variable), its value, what is supported,
and the fix. The error is a :class:`~hpu_plugin.errors.Refusal`, so a hook that raises
it reaches the user instead of being swallowed as a plugin fault by the registry, and it is
a ``ValueError`` for callers that know nothing of hooks.
"""

from __future__ import annotations

from hpu_plugin.errors import Refusal, SettingError
from hpu_plugin.gaudi.findings import Finding


class GaudiConfigError(Refusal):
    """A Gaudi setting that cannot work; raised before any kernel or collective runs."""

    def __init__(
        self, variable: str, value: object, supported: str, fix: str, problem: str = ""
    ) -> None:
        self.variable = variable
        self.value = value
        self.supported = supported
        self.fix = fix
        self.problem = problem
        text = f"{variable} is unset" if value is None else f"{variable}={value!r}"
        if problem:
            text += f": {problem}"
        super().__init__(f"{text}. Supported: {supported}. Fix: {fix}")

    @classmethod
    def from_setting(cls, error: SettingError) -> GaudiConfigError:
        """The settings parser's refusal of a value, as a Gaudi rule's refusal (which a
        hook may raise to reach the user): same variable, value, accepted form and fix."""
        return cls(error.variable, error.value, error.accepted, error.fix)

    def as_finding(self, check: str) -> Finding:
        return Finding(
            check=check,
            severity="error",
            variable=self.variable,
            value=None if self.value is None else str(self.value),
            message=str(self),
            fix=self.fix,
        )
