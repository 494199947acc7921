"""Which of the consumers' bridge names the running process provides, and the counts.

``resolve`` runs inside a process that asked for the emulator (``HPU_PLUGIN_EMULATE=1``
before ``import torch``): a name resolves as the consumer would reach it, by importing its
longest importable module prefix and reading the rest as attributes. ``torch.ops.hpu.x``
resolves when the op is registered (reading an unknown op raises, as on torch).
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
SURFACE = HERE / "surface.json"
LEFT_OUT = HERE / "left_out.json"


def _step(target: object, prefix: str, part: str) -> object:
    """``target.part`` as ``from prefix import part`` finds it: the attribute first (a
    package's ``__init__`` may bind a class over its submodule of the same name), else the
    submodule ``prefix.part``."""
    try:
        return getattr(target, part)
    except AttributeError as missing:
        if not isinstance(target, ModuleType):
            raise
        absent = missing
    submodule = f"{prefix}.{part}"
    try:
        importlib.import_module(submodule)
    except ModuleNotFoundError as error:
        # No such submodule (torch.ops namespaces are modules too): the attribute error is
        # what the consumer sees. A module missing inside the submodule is its own error.
        if error.name and (submodule == error.name or submodule.startswith(error.name + ".")):
            raise absent from None
        raise
    return getattr(target, part)


def resolve(name: str) -> str | None:
    """None when ``name`` exists here, else why not (the exception as the consumer sees it)."""
    parts = name.split(".")
    try:
        target: object = importlib.import_module(parts[0])
        for index, part in enumerate(parts[1:], start=1):
            target = _step(target, ".".join(parts[:index]), part)
    except Exception as error:  # whatever the consumer would see
        return f"{type(error).__name__}: {error}"
    return None


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Tally:
    """One consumer's (or all consumers') names against the emulator."""

    total: int
    present: int
    missing: tuple[str, ...]

    @property
    def share(self) -> float:
        return self.present / self.total if self.total else 1.0


def uncounted(name: str, left_out: dict) -> bool:
    """Whether ``name`` is outside the bridge's surface: in a separate package, or absent
    from the real bridge as well."""
    return name in left_out["not_in_bridge"] or any(
        name == prefix or name.startswith(prefix + ".")
        for prefix in left_out["separate_packages"])


def tally(names: set[str], errors: dict[str, str | None], left_out: dict) -> Tally:
    counted = sorted(name for name in names if not uncounted(name, left_out))
    missing = tuple(name for name in counted if errors.get(name) is not None)
    return Tally(len(counted), len(counted) - len(missing), missing)


def tallies(errors: dict[str, str | None], surface: dict, left_out: dict) -> dict[str, Tally]:
    """Per consumer and "all" (the distinct names of every consumer)."""
    consumers = surface["consumers"]
    result = {key: tally(set(names), errors, left_out) for key, names in consumers.items()}
    every = set().union(*(set(names) for names in consumers.values()))
    result["all"] = tally(every, errors, left_out)
    return result
