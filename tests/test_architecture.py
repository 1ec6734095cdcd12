"""The package import graph is a DAG: study → plan → runner → platforms/probes/workloads → store →
analysis → report, with cli/api on top and small leaf utilities at the bottom.

Every import counts, function-level ones included (a cycle hidden in a function still couples the
packages); only ``if TYPE_CHECKING:`` imports are left out, as they never run."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "isobench"
#: (importer, imported) -> where: "file:line" of one import that makes the edge
Edges = dict[tuple[str, str], str]


def _top(module: str) -> str | None:
    """The top-level isobench package or module a dotted name belongs to; None outside isobench."""
    parts = module.split(".")
    if parts[0] != "isobench" or len(parts) < 2:
        return None
    return parts[1]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, package: list[str]) -> list[tuple[str, int]]:
    """Absolute dotted names imported anywhere in ``tree`` outside ``if TYPE_CHECKING:`` blocks."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the importing file's package
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from isobench import x` names module x, so each name counts on its own
            found.extend((f"{base}.{alias.name}" if base == "isobench" else base, node.lineno)
                         for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> Edges:
    edges: Edges = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC.parent)
        package = list(rel.parts[:-1])  # the package a relative import starts from
        source = _top(".".join(rel.with_suffix("").parts))
        source = "isobench" if source == "__init__" else source  # the package's own __init__.py
        if source is None:
            continue
        for name, line in _imports(ast.parse(path.read_text(), str(path)), package):
            target = _top(name)
            if target is not None and target != source:
                edges.setdefault((source, target), f"{rel}:{line}")
    return edges


def find_cycle(edges: Edges) -> list[str] | None:
    """One cycle as a node list (first node repeated at the end), or None for a DAG."""
    successors: dict[str, list[str]] = defaultdict(list)
    for source, target in sorted(edges):
        successors[source].append(target)
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in successors[node]:
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (cycle := dfs(nxt)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(successors):
        if node not in state and (cycle := dfs(node)) is not None:
            return cycle
    return None


def test_find_cycle_sees_a_cycle() -> None:
    assert find_cycle({("a", "b"): "", ("b", "c"): "", ("c", "a"): ""}) == ["a", "b", "c", "a"]
    assert find_cycle({("a", "b"): "", ("a", "c"): "", ("b", "c"): ""}) is None


def test_graph_sees_function_level_imports_only_outside_type_checking() -> None:
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import isobench.a\n"
                     "def f():\n    from isobench.b import x\n    from . import y\n")
    names = [name for name, _ in _imports(tree, ["isobench", "c"])]
    assert "isobench.a" not in names
    assert "isobench.b" in names and "isobench.c" in names


def test_package_graph_has_no_cycle() -> None:
    edges = import_graph()
    assert ("cli", "runner") in edges  # the scan sees real imports
    cycle = find_cycle(edges)
    where = [f"{a} -> {b} ({edges[a, b]})" for a, b in zip(cycle, cycle[1:], strict=False)] if cycle else []
    assert cycle is None, "import cycle between isobench packages:\n  " + "\n  ".join(where)


def test_the_study_schema_needs_no_registry_or_plan() -> None:
    # registry and plan checks run in studyfile.py, so everything else may import the schema
    assert {target for source, target in import_graph() if source == "study"} <= {"hostinfo", "errors"}


#: the most lines one module may have: past it, a module holds more than one concept
MAX_MODULE_LINES = 500


def test_no_module_is_over_the_size_limit() -> None:
    sizes = {path.relative_to(SRC).as_posix(): len(path.read_text().splitlines()) for path in SRC.rglob("*.py")}
    assert len(sizes) > 100 and max(sizes.values()) > 300  # the scan sees the real tree
    over = {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES}
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split them along their seams): {over}"
