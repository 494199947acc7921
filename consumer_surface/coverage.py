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

HERE = Path(__file__).resolve().parent
SURFACE = HERE / "surface.json"
LEFT_OUT = HERE / "left_out.json"


def resolve(name: str) -> str | None:
    """None when ``name`` exists here, else why not (the exception as the consumer sees it)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            target: object = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name and not module_name.startswith(error.name + ".") \
                    and error.name != module_name:
                return f"{type(error).__name__}: {error}"
            continue
        except Exception as error:  # an import that fails inside: the consumer sees it
            return f"{type(error).__name__}: {error}"
        try:
            for attribute in parts[cut:]:
                target = getattr(target, attribute)
        except Exception as error:
            return f"{type(error).__name__}: {error}"
        return None
    return f"ModuleNotFoundError: No module named {parts[0]!r}"


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


def separate(name: str, left_out: dict) -> bool:
    """Whether ``name`` belongs to a package outside the bridge (not counted)."""
    return any(name == prefix or name.startswith(prefix + ".")
               for prefix in left_out["separate_packages"])


def tally(names: set[str], errors: dict[str, str | None], left_out: dict) -> Tally:
    counted = sorted(name for name in names if not separate(name, left_out))
    missing = tuple(name for name in counted if errors.get(name) is not None)
    return Tally(len(counted), len(counted) - len(missing), missing)


def tallies(errors: dict[str, str | None], surface: dict, left_out: dict) -> dict[str, Tally]:
    """Per consumer and "all" (the distinct names of every consumer)."""
    consumers = surface["consumers"]
    result = {key: tally(set(names), errors, left_out) for key, names in consumers.items()}
    every = set().union(*(set(names) for names in consumers.values()))
    result["all"] = tally(every, errors, left_out)
    return result
