"""The rules of the house that docs/architecture.md states, read from the sources: layers
import downwards only, one post-import finder, one "log once" helper, short functions."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "hpu_plugin"
#: Modules every layer may import: they import nothing of the package above them.
BASE = {"settings", "reporting", "patching", "importhook"}
#: What each lower layer may import of the package, besides itself and BASE
#: (``hookspecs`` is the contract: ``GaudiConfigError`` is a ``Refusal``).
ALLOWED = {
    "gaudi": {"hookspecs"},
    "emulation": {"gaudi"},
}


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _package_imports(path: Path) -> set[str]:
    """The first component below ``hpu_plugin`` of every ``hpu_plugin.*`` import."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] if node.module != "hpu_plugin" else [
                f"hpu_plugin.{alias.name}" for alias in node.names]
        found |= {name.split(".")[1] for name in names
                  if name.startswith("hpu_plugin.") and name.count(".") >= 1}
    return found


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_lower_layers_do_not_import_upwards(layer):
    allowed = ALLOWED[layer] | BASE | {layer}
    wrong = {
        str(path.relative_to(PACKAGE)): sorted(_package_imports(path) - allowed)
        for path in (PACKAGE / layer).rglob("*.py")
    }
    assert {path: names for path, names in wrong.items() if names} == {}


def test_the_base_modules_import_only_each_other():
    for name in BASE:
        assert _package_imports(PACKAGE / f"{name}.py") <= BASE, name


def test_one_meta_path_finder_and_one_log_once_set():
    finders = [path.name for path in _sources() if "MetaPathFinder" in path.read_text()]
    assert finders == ["importhook.py"]
    for path in _sources():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in {"_warned", "_said", "_LOGGED"}:
                raise AssertionError(f"{path.relative_to(PACKAGE)}: {node.id}; use reporting")


def test_no_function_over_80_lines():
    long = [
        f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({length} lines)"
        for path in _sources()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and (length := node.end_lineno - node.lineno + 1) > 80
    ]
    assert long == []
