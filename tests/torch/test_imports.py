"""Imports inside hndl.torch run one way: no module imports another that imports it back.

Every import statement counts, including those under ``TYPE_CHECKING`` and inside functions
(a lazy import closes a circle as surely as an eager one).
"""

from __future__ import annotations

import ast
from pathlib import Path

import hndl.torch

PACKAGE = Path(hndl.torch.__file__).parent


def _imports(path: Path) -> set[str]:
    """The hndl.torch modules ``path`` imports, by module name."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                if node.module:
                    names.add(node.module.split(".")[0])
                else:
                    names.update(alias.name for alias in node.names)
            elif node.level == 0 and (node.module or "").startswith("hndl.torch."):
                names.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            names.update(alias.name.split(".")[2] for alias in node.names if alias.name.startswith("hndl.torch."))
    return names


def _graph() -> dict[str, set[str]]:
    modules = {path.stem: path for path in PACKAGE.glob("*.py") if path.stem != "__init__"}
    return {name: _imports(path) & set(modules) for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle as a path of module names, or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(name: str) -> list[str]:
        state[name] = 1
        path.append(name)
        for imported in sorted(graph[name]):
            if state.get(imported) == 1:
                return path[path.index(imported):] + [imported]
            if imported not in state:
                found = visit(imported)
                if found:
                    return found
        path.pop()
        state[name] = 2
        return []

    for name in sorted(graph):
        if name not in state:
            found = visit(name)
            if found:
                return found
    return []


def test_no_import_circle_among_hndl_torch_modules():
    cycle = _cycle(_graph())
    assert not cycle, " -> ".join(cycle)


def test_the_generated_programs_never_import_the_graph_module():
    graph = _graph()
    assert "programs" in graph["graph_module"]
    assert "graph_module" not in graph["programs"]


def test_the_walk_finds_a_circle_when_there_is_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []
