"""No import circles among the modules of ``exporter/``.

The graph is read from the sources with :mod:`ast`: every ``import`` and ``from ... import``
of an ``exporter`` module, wherever it stands (module level, inside a function, under
``TYPE_CHECKING``), is an edge. A function-level import or a type-only import hides a circle
from Python's import machinery, not from the design: the data flows one way, so must the
imports. ``from package import name`` is an edge to the submodule when ``name`` is one, else to
the package's ``__init__``; the implicit import of parent packages is not an edge (every
package's ``__init__`` re-exporting its submodules would otherwise be a circle).
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "exporter"

#: The pipeline, checked on its own so that a failure says which side a circle is on.
PIPELINE = f"{PACKAGE}.pipeline"


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int

    def __str__(self) -> str:
        return f"{module_path(self.source)}:{self.line} imports {self.target}"


def module_path(module: str) -> str:
    path = REPO / Path(*module.split("."))
    return str((path / "__init__.py" if path.is_dir() else path.with_suffix(".py")).relative_to(REPO))


def modules(root: Path = REPO / PACKAGE) -> dict[str, Path]:
    """Dotted module name -> source file, packages by their ``__init__.py``."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports(module: str, path: Path, known: Mapping[str, Path]) -> Iterator[Edge]:
    """The edges from ``module`` to the modules of ``known`` it imports, anywhere in it."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield Edge(module, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                target = f"{source}.{alias.name}"
                if target in known:
                    yield Edge(module, target, node.lineno)
                elif source in known:
                    yield Edge(module, source, node.lineno)


def import_graph(root: Path = REPO / PACKAGE) -> dict[str, dict[str, Edge]]:
    """Module -> imported module -> the first import of it (for the report)."""
    known = modules(root)
    graph: dict[str, dict[str, Edge]] = {name: {} for name in known}
    for name, path in known.items():
        for edge in imports(name, path, known):
            if edge.target != name:
                graph[name].setdefault(edge.target, edge)
    return graph


def strongly_connected(graph: Mapping[str, Mapping[str, Edge]]) -> list[list[str]]:
    """Tarjan's components of more than one module (a circle each), iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def a_circle(graph: Mapping[str, Mapping[str, Edge]], component: list[str]) -> list[Edge]:
    """The shortest circle through the component's first module, as its import edges."""
    members = set(component)
    start = component[0]
    came_by: dict[str, Edge] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for target, edge in sorted(graph[node].items()):
            if target not in members:
                continue
            if target == start:
                path = [edge]
                while path[0].source != start:
                    path.insert(0, came_by[path[0].source])
                return path
            if target not in came_by:
                came_by[target] = edge
                queue.append(target)
    raise AssertionError(f"{component} is not a circle")


def report(graph: Mapping[str, Mapping[str, Edge]], components: list[list[str]]) -> str:
    lines = []
    for component in components:
        lines.append(f"circle among {', '.join(component)}; for example:")
        lines += [f"    {edge}" for edge in a_circle(graph, component)]
    return "\n".join(lines)


def circles(*, in_pipeline: bool) -> list[list[str]]:
    """The circles wholly inside exporter/pipeline/ or those with any module outside it."""
    return [
        component
        for component in strongly_connected(import_graph())
        if all(m.startswith(PIPELINE) for m in component) == in_pipeline
    ]


# ------------------------------------------------------------------ the checker itself


def write_package(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"


def test_a_function_level_import_closes_a_circle(tmp_path: Path) -> None:
    pkg = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import thing\n",
            "pkg/b.py": "def thing():\n    from pkg import a\n    return a\n",
            "pkg/c.py": "import pkg.a\n",
        },
    )
    graph = import_graph(pkg)
    assert strongly_connected(graph) == [["pkg.a", "pkg.b"]]
    assert [(e.source, e.target, e.line) for e in a_circle(graph, ["pkg.a", "pkg.b"])] == [
        ("pkg.a", "pkg.b", 1),
        ("pkg.b", "pkg.a", 2),
    ]


def test_type_checking_and_relative_imports_are_edges_and_parent_packages_are_not(tmp_path: Path) -> None:
    pkg = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.sub.x import X\n",
            "pkg/sub/__init__.py": "from .x import X\n",
            "pkg/sub/x.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..y import Y\nX = 1\n"
            ),
            "pkg/y.py": "from pkg.sub import x\nY = 2\n",
        },
    )
    graph = import_graph(pkg)
    assert set(graph["pkg.sub"]) == {"pkg.sub.x"}
    assert strongly_connected(graph) == [["pkg.sub.x", "pkg.y"]]


def test_importing_a_name_from_a_package_is_an_edge_to_its_init(tmp_path: Path) -> None:
    pkg = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/config/__init__.py": "from pkg.config.model import parse\n",
            "pkg/config/model.py": "def parse():\n    from pkg.config.section import Section\n",
            "pkg/config/section.py": "from pkg.config import parse\nSection = 1\n",
        },
    )
    assert strongly_connected(import_graph(pkg)) == [["pkg.config", "pkg.config.model", "pkg.config.section"]]


# ------------------------------------------------------------------ the exporter


def test_the_graph_covers_the_package() -> None:
    graph = import_graph()
    assert f"{PACKAGE}.config.model" in graph
    assert f"{PACKAGE}.config.history" in graph["exporter.config.model"]
    assert len(graph) > 50


def test_no_import_circle_among_exporter_modules_outside_the_pipeline() -> None:
    found = circles(in_pipeline=False)
    assert not found, "import circles:\n" + report(import_graph(), found)


def test_no_import_circle_inside_the_pipeline() -> None:
    found = circles(in_pipeline=True)
    assert not found, "import circles:\n" + report(import_graph(), found)
