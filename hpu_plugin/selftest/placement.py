"""Which Gaudi modules the checks may acquire, on a server other jobs may be using.

Candidates are the modules ``hl-smi`` lists (in index order), narrowed to what the user
chose (``HLS_MODULE_ID``, else ``HABANA_VISIBLE_MODULES``). Whether a module is free is
learnt by trying it: a check's process acquires its module first, and the Gaudi driver
refuses to open a module another process holds ("another user is working on it"), so the
attempt cannot disturb that process. A refused module is marked busy and the check is run
again on the next candidate. ``hl-smi``'s process list is not used: inside a container it
does not show other users' processes.

Two-process checks take a supported pair of modules (0,1 | 2,3 | 4,5 | 6,7) on a whole
server; where the host shows only part of a server, any two free modules.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from hpu_plugin.gaudi import selection, visibility
from hpu_plugin.gaudi.config_error import GaudiConfigError


class Placement:
    """The candidates, what has been found busy, and the choice for a number of modules."""

    def __init__(
        self, listed: Sequence[int] | None, environ: Mapping[str, str] = os.environ
    ) -> None:
        self.listed = list(listed) if listed is not None else None
        self.busy: list[int] = []
        self.origin = "hl-smi"
        chosen: Sequence[int] | None = None
        try:
            module_id = visibility.parse_module_id(environ.get(visibility.MODULE_ID))
            chosen = [module_id] if module_id is not None else visibility.visible_modules(environ)
            if module_id is not None:
                self.origin = visibility.MODULE_ID
            elif chosen is not None:
                self.origin = visibility.MODULES
        except GaudiConfigError as exc:
            raise ValueError(str(exc)) from exc
        if chosen is not None:
            self.candidates: list[int] | None = [
                m for m in chosen if self.listed is None or m in self.listed
            ]
        else:
            self.candidates = self.listed

    def free(self) -> list[int] | None:
        if self.candidates is None:
            return None
        return [m for m in self.candidates if m not in self.busy]

    def choose(self, count: int) -> tuple[list[int] | None, str]:
        """Modules for a check needing ``count``: ``([], reason)`` when it cannot run,
        ``(None, "")`` when the modules are unknown and one is left to the Gaudi software."""
        free = self.free()
        if free is None:
            if count == 1:
                return None, ""
            return [], f"hl-smi cannot list the modules, so no {count} free ones can be chosen"
        if len(free) < count:
            held = f" ({len(self.busy)} held by other processes)" if self.busy else ""
            return [], f"{len(free)} module(s) free{held}, {count} needed"
        if count == 1:
            return free[:1], ""
        groups = [g for g in selection.SUPPORTED_GROUPS[count] if set(g) <= set(free)]
        if groups:
            return list(groups[0]), ""
        if self.listed is not None and set(self.listed) == selection.WHOLE_SERVER:
            return [], (
                f"no supported group of {count} free among modules {free} "
                f"({selection.supported_groups_text()})"
            )
        return free[:count], ""

    def mark_busy(self, module: str) -> bool:
        """Note a module another process holds; False when it is not one we chose from."""
        try:
            number = int(module)
        except ValueError:
            return False
        if number in self.busy or self.candidates is None or number not in self.candidates:
            return False
        self.busy.append(number)
        return True

    def to_dict(self) -> dict[str, object]:
        return {"listed": self.listed, "candidates": self.candidates, "origin": self.origin,
                "busy": self.busy}
