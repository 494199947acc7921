"""Every bridge name a consumer's source uses, read with ``ast`` (never imported or run).

A "bridge name" is a dotted name the consumer expects the Gaudi stack to provide:
``habana_frameworks.*`` modules and attributes, ``torch.hpu.*`` and ``torch.ops.hpu.*``.
Code reaches them in several spellings, each resolved to the full dotted name:

- imports: ``import habana_frameworks.torch.core as htcore``,
  ``from habana_frameworks.torch.hpu import wrap_in_hpu_graph``;
- attribute chains on an import's alias: ``htcore.hpu.ModuleCacher`` (the longest chain;
  a call ends it, so ``torch.hpu.Event().record`` gives ``torch.hpu.Event``);
- probes: ``hasattr(torch.hpu, "memory_stats")``, ``getattr(htcore, "mark_step", None)``;
- modules named by a string: ``importlib.import_module("habana_frameworks.torch")``,
  ``find_spec(...)``, ``package_available(...)``.

An assignment (``torch.hpu.x = ...``) is the consumer's own patch, not a name it needs.
Aliases are collected per file, whatever the scope of their import: consumers import the
bridge inside functions (it is optional to them), and a file rarely rebinds such a name.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

#: Roots of what the Gaudi stack provides. ``torch`` itself is everyone's; only its
#: ``hpu`` namespaces are the bridge's.
BRIDGE_PREFIXES = ("habana_frameworks", "torch.hpu.", "torch.ops.hpu.", "habana_")
#: Calls whose first string argument names a module the consumer looks for.
MODULE_BY_STRING = frozenset({
    "import_module", "find_spec", "__import__", "package_available", "module_available",
    "_is_package_available", "is_package_available", "RequirementCache",
})
PROBES = frozenset({"hasattr", "getattr"})


@dataclass(frozen=True)
class Use:
    """One use of a bridge name: where it is and how it was spelled."""

    name: str
    kind: str  # "import", "attribute", "probe" or "string"
    line: int


def is_bridge(name: str) -> bool:
    """Whether ``name`` is the Gaudi stack's (``torch.hpu`` alone is torch's device module
    namespace, present on every torch; its attributes are the bridge's)."""
    return name == "habana_frameworks" or name.startswith(BRIDGE_PREFIXES)


def _aliases(tree: ast.AST) -> tuple[dict[str, str], list[Use]]:
    """Local name -> dotted name for every absolute import of torch or the bridge, and
    the bridge modules and names imported."""
    aliases: dict[str, str] = {}
    uses: list[Use] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    aliases[root] = root
                if is_bridge(alias.name):
                    uses.append(Use(alias.name, "import", node.lineno))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if alias.name == "*":
                    full = node.module
                else:
                    aliases[alias.asname or alias.name] = full
                if is_bridge(full):
                    uses.append(Use(full, "import", node.lineno))
    return {local: full for local, full in aliases.items()
            if full.split(".")[0] in {"torch", "habana_frameworks"}}, uses


def _parts(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ["a", "b", "c"]; None when the chain does not start at a name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _chain(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """The dotted name of ``a.b.c`` when ``a`` (or ``self.a``) is an alias, else None."""
    parts = _parts(node)
    if not parts:
        return None
    for length in (2, 1):
        root = ".".join(parts[:length])
        if root in aliases:
            return ".".join([aliases[root], *parts[length:]])
    return None


def _instance_aliases(tree: ast.AST, aliases: dict[str, str]) -> dict[str, str]:
    """``self.hpu = hpu`` makes ``self.hpu.synchronize()`` the bridge's (DeepSpeed keeps
    the bridge module on its accelerator object that way)."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = _parts(node.targets[0])
            value = _chain(node.value, aliases)
            if target and len(target) == 2 and target[0] == "self" and value:
                found[".".join(target)] = value
    return found


def _callee(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _string_arg(node: ast.Call, index: int) -> str | None:
    if len(node.args) > index:
        arg = node.args[index]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg.value
    return None


def _calls(tree: ast.AST, aliases: dict[str, str]) -> Iterator[Use]:
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        callee = _callee(node)
        if callee in PROBES and node.args:
            owner = _chain(node.args[0], aliases)
            attribute = _string_arg(node, 1)
            if owner and attribute and is_bridge(f"{owner}.{attribute}"):
                yield Use(f"{owner}.{attribute}", "probe", node.lineno)
        elif callee in MODULE_BY_STRING:
            module = _string_arg(node, 0)
            if module and is_bridge(module):
                yield Use(module, "string", node.lineno)


def _attributes(tree: ast.AST, aliases: dict[str, str]) -> Iterator[Use]:
    """The longest alias-rooted chain of each expression, read (not assigned)."""
    inner: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if id(node) in inner:
                continue
            value = node.value
            while isinstance(value, ast.Attribute):
                inner.add(id(value))
                value = value.value
            if not isinstance(node.ctx, ast.Load):
                continue
            name = _chain(node, aliases)
            if name and is_bridge(name):
                yield Use(name, "attribute", node.lineno)


def bridge_uses(source: str) -> list[Use]:
    """Every bridge name ``source`` uses, in order of appearance."""
    tree = ast.parse(source)
    aliases, uses = _aliases(tree)
    aliases.update(_instance_aliases(tree, aliases))
    uses.extend(_attributes(tree, aliases))
    uses.extend(_calls(tree, aliases))
    return sorted(uses, key=lambda use: (use.line, use.name))
