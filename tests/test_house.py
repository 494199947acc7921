"""The rules of the house that docs/architecture.md states, read from the sources: every layer
imports only what the matrix allows, no import goes in a circle, the doc says the same as the
matrix and names every module, one post-import finder, one "log once" helper, short functions.

Which imports count: every ``import`` and ``from ... import`` of the package wherever it
stands, at a module's top or inside a function. A function-local import runs as surely as a
top-level one, only later; it puts off an import cost (activation's full path, the CLI), it
does not make a dependency go away, and a circle through one is still a circle to understand.
Only imports under ``if TYPE_CHECKING:`` are left out: they never run. Importing ``a.b.c``
runs ``a`` and ``a.b`` first, but a module is not said to import its own parent packages by
that.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "hpu_plugin"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

BASE = frozenset({"errors", "settings", "reporting", "patching", "importhook"})
#: Which layer (a folder or a top-level module of ``hpu_plugin``) may import which, besides
#: itself and the package root ``hpu_plugin`` (``__version__`` and the process status
#: ``state``; it imports nothing). Bottom to top; docs/architecture.md has the same table.
ALLOWED: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    "settings": frozenset({"errors"}),
    "reporting": frozenset(),
    "patching": frozenset({"reporting"}),
    "importhook": frozenset({"patching", "reporting"}),
    "hookspecs": BASE,
    "gaudi": BASE | {"hookspecs"},
    "machine": BASE | {"gaudi"},
    "loader": BASE | {"hookspecs"},
    "switches": BASE | {"hookspecs", "loader"},
    "guard": BASE | {"hookspecs", "gaudi"},
    "registry": BASE | {"hookspecs", "gaudi", "loader", "switches", "guard"},
    "plugins": BASE | {"hookspecs", "gaudi", "machine"},
    "emulator": BASE,
    "hosts": BASE | {"hookspecs", "gaudi", "machine", "registry"},
    "fast_paths": BASE | {"hookspecs", "gaudi", "machine", "registry", "hosts"},
    "diagnostics": BASE | {"hookspecs", "gaudi", "machine", "loader", "switches", "registry",
                           "hosts", "fast_paths"},
    "activation": BASE | {"gaudi", "registry", "emulator", "hosts", "fast_paths",
                          "diagnostics"},
    "selftest": BASE | {"hookspecs", "gaudi", "machine", "registry"},
    "cli": BASE | {"diagnostics", "selftest"},
    "fp8": frozenset({"hosts"}),
    "__main__": frozenset({"cli"}),
}
#: The one import that runs against the matrix: the package root's ``autoload`` (the
#: ``torch.backends`` entry point) answers the common case itself and hands every other
#: case to ``activation``, inside the function, once the root is fully loaded. The root is
#: both the bottom of the house (``state``, read by every layer) and its front door: one
#: module on every ``import torch`` without Gaudi instead of two (0.2 ms each).
ENTRY = ("hpu_plugin", "hpu_plugin.activation")


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in _sources()}


def _layer(module: str) -> str:
    """``hpu_plugin.gaudi.hlsmi`` -> ``gaudi``; the package root is ``hpu_plugin``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _resolve(name: str) -> str | None:
    """The module of the package that importing ``name`` runs last (``name`` itself, or the
    module that defines the imported attribute); None outside the package."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")
    )


@cache
def imports_of(module: str) -> frozenset[str]:
    """The package's modules that ``module`` imports, anywhere in it (see the docstring)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    pending: list[ast.AST] = [ast.parse(path.read_text())]
    while pending:
        node = pending.pop()
        if _is_type_checking(node):
            continue
        pending.extend(ast.iter_child_nodes(node))
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                     for alias in node.names]
        else:
            continue
        found |= {target for name in names if (target := _resolve(name)) not in (None, module)}
    return frozenset(found)


def circles(graph: Mapping[str, frozenset[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module of ``graph`` (module -> what it
    imports), by Tarjan's algorithm without recursion."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def enter(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        work.append((node, iter(sorted(graph.get(node, ())))))

    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = []
        enter(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    members = [stack.pop()]
                    while members[-1] != node:
                        members.append(stack.pop())
                    on_stack.difference_update(members)
                    if len(members) > 1:
                        found.append(sorted(members))
            elif target not in index:
                enter(target)
            elif target in on_stack:
                low[node] = min(low[node], index[target])
    return found


def test_every_layer_is_in_the_matrix():
    layers = {_layer(module) for module in MODULES} - {"hpu_plugin"}
    assert sorted(layers - set(ALLOWED)) == [], "place the new layer in ALLOWED and the doc"
    assert sorted(set(ALLOWED) - layers) == []


def test_the_matrix_itself_has_no_circle():
    order = list(ALLOWED)
    upwards = {layer: sorted(name for name in allowed if order.index(name) >= order.index(layer))
               for layer, allowed in ALLOWED.items()}
    assert {layer: names for layer, names in upwards.items() if names} == {}


def test_every_module_imports_only_what_its_layer_may():
    wrong = {}
    for module in MODULES:
        layer = _layer(module)
        may = ALLOWED.get(layer, frozenset()) | {layer, "hpu_plugin"}
        targets = imports_of(module) - ({ENTRY[1]} if module == ENTRY[0] else set())
        names = sorted({_layer(target) for target in targets} - may)
        if names:
            wrong[module] = names
    assert wrong == {}


def test_the_package_root_imports_only_activation_from_its_entry_point():
    assert imports_of("hpu_plugin") == {ENTRY[1]}
    tree = ast.parse(MODULES["hpu_plugin"].read_text())
    top = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert top == [], "the root is on every import torch: import inside autoload only"
    (autoload,) = [node for node in tree.body
                   if isinstance(node, ast.FunctionDef) and node.name == "autoload"]
    inside = {alias.name for node in ast.walk(autoload) if isinstance(node, ast.ImportFrom)
              for alias in node.names if node.module == ENTRY[1]}
    assert inside == {"autoload"}


def test_only_the_emulator_module_imports_the_emulator():
    """The emulator is another distribution: ``hpu_plugin.emulator`` is the one door to it."""
    found = set()
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(name.split(".")[0] == "hpu_emulator" for name in names):
                found.add(module)
    assert found == {"hpu_plugin.emulator"}


def test_no_import_circle():
    graph = {module: imports_of(module) for module in MODULES}
    graph[ENTRY[0]] = graph[ENTRY[0]] - {ENTRY[1]}
    assert circles(graph) == []


def test_the_circle_finder_finds_circles():
    """The check above can fail: circles made up for it are found, and only they."""
    graph = {"a": frozenset({"b"}), "b": frozenset({"c", "e"}), "c": frozenset({"a"}),
             "d": frozenset({"a", "e"}), "e": frozenset({"f"}), "f": frozenset({"e"}),
             "g": frozenset()}
    assert circles(graph) == [["e", "f"], ["a", "b", "c"]]


def _doc_matrix() -> dict[str, frozenset[str]]:
    """The table of docs/architecture.md's "Who may import whom": first column the layer,
    last column what it may import (backticked names; ``base`` for the four base modules)."""
    text = ARCHITECTURE.read_text()
    section = text.split("## Who may import whom", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        layer = cells[0].strip("`").removesuffix(".py").removesuffix("/")
        names = set(re.findall(r"`([\w.]+?)(?:\.py|/)?`", cells[-1]))
        if re.match(r"base\b", cells[-1]):
            names |= BASE
        rows[layer] = frozenset(names)
    return rows


def test_the_architecture_doc_has_the_same_matrix():
    assert _doc_matrix() == ALLOWED


def _doc_modules() -> dict[str, set[str]]:
    """docs/architecture.md's "Every module": one line a folder, ``- `gaudi/`: ...``, naming
    each of its modules as ``name.py`` (``checks/detect.py`` a level down)."""
    section = ARCHITECTURE.read_text().split("## Every module", 1)[1].split("\n## ", 1)[0]
    listed = {}
    for match in re.finditer(r"^- `(\w+)/`:(.*?)(?=^- `|\Z)", section, re.M | re.S):
        listed[match[1]] = set(re.findall(r"`([\w/]+\.py)`", match[2]))
    return listed


def test_the_architecture_doc_names_every_module():
    actual: dict[str, set[str]] = {}
    for path in _sources():
        relative = path.relative_to(PACKAGE)
        if len(relative.parts) == 1:
            continue  # top-level modules are the rows of the matrix
        folder, inner = relative.parts[0], Path(*relative.parts[1:])
        if inner.name != "__init__.py":
            actual.setdefault(folder, set()).add(inner.as_posix())
    assert _doc_modules() == actual
    top_level = {path.stem for path in PACKAGE.glob("*.py")} - {"__init__"}
    assert top_level <= set(_doc_matrix())


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


def test_no_two_modules_share_a_name():
    """A module name means one thing in the package: ``releases`` in two folders would be
    two meanings a reader has to tell apart by path."""
    seen: dict[str, list[str]] = {}
    for path in _sources():
        if path.name != "__init__.py":
            seen.setdefault(path.stem, []).append(path.relative_to(PACKAGE).as_posix())
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def test_the_architecture_doc_names_every_emulator_module():
    emulator = ROOT / "packages" / "hpu-emulator" / "hpu_emulator"
    section = ARCHITECTURE.read_text().split("## The emulator distribution", 1)[1]
    named = set(re.findall(r"`([\w/]+\.py)`", section.split("\n## ", 1)[0]))
    actual = {path.relative_to(emulator).as_posix() for path in emulator.rglob("*.py")
              if "standins" not in path.parts and path.name != "__init__.py"}
    assert actual - named == set()
