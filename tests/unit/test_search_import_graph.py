"""No import cycles inside ``app.search``: each adapter module can be read (and loaded) alone.

The graph counts every import, also those inside a function: a lazy import is how a
cycle hides (``postgres_store`` once imported ``postgres_pages`` inside a method
while ``postgres_pages`` imported ``postgres_store`` at the top), and it still
means neither module can be understood without the other.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.processes import PROJECT_ROOT

PACKAGE = "app.search"
PACKAGE_DIR = PROJECT_ROOT / "app" / "search"


def _module_name(path: Path) -> str:
    return PACKAGE if path.stem == "__init__" else f"{PACKAGE}.{path.stem}"


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """Module → the modules of the same package it imports (anywhere in its body)."""
    modules = {_module_name(path): path for path in sorted(package_dir.glob("*.py"))}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # ``from app.search import port`` names a module; ``import open_store`` does not.
                targets = [node.module]
                targets += [f"{node.module}.{alias.name}" for alias in node.names]
            for target in targets:
                if target in modules and target != name:
                    graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (``[a, b, …, a]``), or ``None``."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        path.append(node)
        for target in sorted(graph[node]):
            cycle = visit(target)
            if cycle is not None:
                return cycle
        path.pop()
        done.add(node)
        return None

    for start in sorted(graph):
        cycle = visit(start)
        if cycle is not None:
            return cycle
    return None


def test_app_search_has_no_import_cycle():
    graph = import_graph(PACKAGE_DIR)
    assert f"{PACKAGE}.postgres_store" in graph and f"{PACKAGE}.port" in graph
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_postgres_adapter_layers_point_one_way():
    """schema <- writes <- pages <- store, and queries <- store: nothing points back."""
    graph = import_graph(PACKAGE_DIR)
    store = f"{PACKAGE}.postgres_store"
    for layer in ("postgres_schema", "postgres_writes", "postgres_queries", "postgres_pages"):
        assert store not in graph[f"{PACKAGE}.{layer}"], layer
    assert f"{PACKAGE}.postgres_pages" in graph[store]


def test_the_cycle_finder_finds_a_lazy_cycle(tmp_path):
    (tmp_path / "a.py").write_text("from app.search.b import thing\n")
    (tmp_path / "b.py").write_text("def f():\n    from app.search import a\n")
    (tmp_path / "c.py").write_text("import app.search.a\n")
    graph = import_graph(tmp_path)
    assert find_cycle(graph) == ["app.search.a", "app.search.b", "app.search.a"]
