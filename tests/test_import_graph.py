"""Imports among hndl/ modules run one way: the import graph has no cycle, lazy imports included.

Every module under hndl/ is read as source (nothing is imported). Each ``import`` and
``from ... import`` anywhere in it, at module level or inside a function, relative or
absolute, adds an edge to the hndl module it names (``from . import x`` names the module
``x`` when it is one). A cycle fails the test, printed as the modules around it.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "hndl"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _resolve_relative(module: str, is_package: bool, level: int, target: str) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The hndl modules ``module`` imports, anywhere in its source."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()

    def add(name: str) -> None:
        # "hndl.a.b.c" may name an attribute of hndl.a.b: keep the longest known module prefix.
        parts = name.split(".")
        for end in range(len(parts), 0, -1):
            candidate = ".".join(parts[:end])
            if candidate in known:
                found.add(candidate)
                return

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "hndl" or alias.name.startswith("hndl."):
                    add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _resolve_relative(module, is_package, node.level, node.module or "")
            elif node.module and (node.module == "hndl" or node.module.startswith("hndl.")):
                base = node.module
            else:
                continue
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                add(submodule if submodule in known else base)
    found.discard(module)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = [0]

    def visit(start: str) -> None:
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for target in edges:
                if target not in index:
                    index[target] = low[target] = counter[0]
                    counter[0] += 1
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    advanced = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return [_cycle_through(graph, set(component)) for component in components]


def _cycle_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A concrete cycle inside one strongly connected component: a -> b -> ... -> a."""
    start = min(component)
    parents = {start: None}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for target in sorted(graph[node] & component):
            if target == start:
                path = [node]
                while parents[path[-1]] is not None:
                    path.append(parents[path[-1]])
                return [*reversed(path), start]
            if target not in parents:
                parents[target] = node
                queue.append(target)
    return sorted(component)


def test_the_walker_sees_module_level_function_level_relative_and_absolute_imports():
    graph = import_graph()
    assert "hndl.errors" in graph["hndl.contracts"]  # module level, relative
    assert "hndl.resolve.sweep" in graph["hndl.resolve.resolver"]  # sibling, relative
    assert "hndl.frontends.capture" in graph["hndl.registry"]  # inside a function
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_the_walker_resolves_imports_the_way_python_does(tmp_path):
    assert _resolve_relative("hndl.a.b", False, 1, "x") == "hndl.a.x"
    assert _resolve_relative("hndl.a", True, 1, "b") == "hndl.a.b"
    assert _resolve_relative("hndl.a.b", False, 2, "c") == "hndl.c"
    source = tmp_path / "b.py"
    source.write_text("import hndl.a.d\nfrom hndl import c\nimport os\ndef f():\n    from .. import e\n"
                      "    from .d import name\n", encoding="utf-8")
    known = {"hndl", "hndl.a", "hndl.a.b", "hndl.a.d", "hndl.c", "hndl.e"}
    assert _imports("hndl.a.b", source, known) == {"hndl.a.d", "hndl.c", "hndl.e"}


def test_no_import_cycle_among_hndl_modules():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles among hndl modules:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module an import chain from ``start`` reaches."""
    seen, todo = set(), [start]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph.get(module, ()))
    return seen


def test_the_drawing_modules_never_reach_the_plan():
    """ResolvedPlan._repr_html_ draws with hndl.drawing, so no import chain from it may reach hndl.plan."""
    graph = import_graph()
    for module in ("hndl.drawing.dot", "hndl.drawing.graphviz", "hndl.drawing.notebook"):
        assert "hndl.plan" not in _reachable(graph, module), module


def test_the_generated_programs_never_import_the_graph_module():
    graph = import_graph()
    assert "hndl.torch.programs" in graph["hndl.torch.graph_module"]
    assert "hndl.torch.graph_module" not in graph["hndl.torch.programs"]


#: What importing HNDL must not import (issue 30, item 7): the compiler stack, which
#: ``torch.compiler.disable`` and friends import on first use (about 1.2 s of CPU, for every
#: `hndl` command), and the model libraries. They belong inside the functions that compile,
#: trace or load a pretrained model; tests/cli/test_cli_imports.py checks the same at run time.
HEAVY_AT_IMPORT = (
    "torch._dynamo", "torch._inductor", "torch.onnx", "torch.compiler.disable", "torch.compiler.allow_in_graph",
    "torch.compiler.assume_constant_result", "torch.compile", "sympy", "triton", "transformers", "timm",
    "torchvision", "diffusers", "safetensors", "huggingface_hub",
)
PACKAGES = (PACKAGE, *sorted(PACKAGE.parent.glob("plugins/*/hndl_*")))


def _dotted(node: ast.AST) -> str:
    """``torch.compiler.disable`` for that attribute chain; "" for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def _heavy(name: str) -> bool:
    return any(name == heavy or name.startswith(heavy + ".") for heavy in HEAVY_AT_IMPORT)


def import_time_uses(source: str) -> list[tuple[int, str]]:
    """(line, name) of each heavy module imported, or heavy API touched, while the module is imported:
    at module level and in class bodies, decorators and default values, not in function bodies."""
    found = []
    todo = list(ast.parse(source).body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            todo.extend(node.decorator_list)
            todo.extend(node.args.defaults)
            todo.extend(default for default in node.args.kw_defaults if default is not None)
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if _heavy(alias.name)]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names
                      if _heavy(node.module) or _heavy(f"{node.module}.{alias.name}")]
        elif isinstance(node, ast.Attribute) and _heavy(_dotted(node)):
            found.append((node.lineno, _dotted(node)))
            continue
        todo.extend(ast.iter_child_nodes(node))
    return sorted(found)


def test_the_import_time_walker_skips_function_bodies_only():
    source = (
        "import torch\nimport sympy\nfrom transformers import AutoModel\nfrom torch._dynamo import config\n"
        "fail = torch.compiler.disable(print)\nsafe = torch.compiler.is_compiling\n"
        "@torch._dynamo.disable\ndef f(x=torch.compile):\n    import timm\n    return torch._dynamo.config\n"
        "class C:\n    probe = torch._dynamo.assume_constant_result(len)\n    def g(self):\n        import triton\n"
    )
    assert import_time_uses(source) == [
        (2, "sympy"), (3, "transformers.AutoModel"), (4, "torch._dynamo.config"), (5, "torch.compiler.disable"),
        (7, "torch._dynamo.disable"), (8, "torch.compile"), (12, "torch._dynamo.assume_constant_result"),
    ]


def test_importing_hndl_and_its_packs_touches_no_compiler_or_model_library():
    found = {
        str(path.relative_to(PACKAGE.parent)): uses
        for package in PACKAGES for path in sorted(package.rglob("*.py"))
        if (uses := import_time_uses(path.read_text(encoding="utf-8")))
    }
    assert found == {}, f"import-time uses of heavy modules (move them into the functions that need them): {found}"
