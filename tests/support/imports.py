"""The package's import graph, read from its source: what each module imports, at module
level or inside a function, never inside ``if TYPE_CHECKING:`` (tests/test_architecture.py,
tests/stores/test_registry.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import chat_memory

PACKAGE = Path(chat_memory.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_in(source: str, package: str, modules: set[str]) -> set[str]:
    """What ``source`` (a module of ``package``) imports, at module level or inside a function
    (a lazy import still runs, and can close a cycle); ``if TYPE_CHECKING`` blocks never run.
    ``from package import name`` is an import of the submodule when ``name`` is one of
    ``modules``, otherwise of the package."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in modules else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


def graph() -> dict[str, set[str]]:
    """Each module of the package and the modules of the package it imports."""
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    edges = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges[name] = imports_in(path.read_text(encoding="utf-8"), package, modules) & modules
    return edges
