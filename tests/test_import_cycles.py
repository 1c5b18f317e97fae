"""No import circles between the modules of our packages.

The graph has one node per module (``benchmarks.load_bench``) and an edge for
every import of another module of ours: at the top, under ``TYPE_CHECKING``
and inside functions alike (a lazy import is still a dependency, and a lazy
circle is still a circle). ``from pkg import name`` points at ``pkg.name``
when that is a module, else at ``pkg`` (its ``__init__``); the implicit
import of a parent package is not an edge. A circle is a strongly connected
component of more than one module (or a module importing itself).

``python tests/test_import_cycles.py`` prints the circles of every package.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("streampunct", "engines", "training", "benchmarks")
#: Packages whose modules must form no circle: all of them.
CHECKED = PACKAGES


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """Every module of ``packages``: dotted name -> file."""
    return {module_name(p): p for package in packages for p in sorted((REPO / package).rglob("*.py"))}


def imports_of(name: str, path: Path, known: Mapping[str, Path]) -> dict[str, int]:
    """Modules in ``known`` that module ``name`` (file ``path``) imports -> first line that does."""
    is_package = path.name == "__init__.py"
    found: dict[str, int] = {}

    def add(target: str, line: int) -> None:
        while target and target not in known:  # an attribute of a module, or a module not ours
            target = target.rpartition(".")[0]
        if target:
            found.setdefault(target, line)

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                add(sub if sub in known else module, node.lineno)
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", ""))
              == "import_module" and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            add(node.args[0].value, node.lineno)
    found.pop(name, None)
    return found


def import_graph(packages: Iterable[str] = PACKAGES) -> dict[str, dict[str, int]]:
    known = modules(PACKAGES)  # edges may cross packages, so resolve against all of them
    wanted = set(modules(packages))
    return {name: imports_of(name, path, known) for name, path in known.items() if name in wanted}


def strongly_connected(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one node, each sorted, in name order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return sorted(out)


def describe(component: list[str], graph: Mapping[str, Mapping[str, int]]) -> str:
    inside = set(component)
    edges = [f"  {a} -> {b} (line {line})" for a in component for b, line in sorted(graph[a].items()) if b in inside]
    return " <-> ".join(component) + ":\n" + "\n".join(edges)


@pytest.mark.parametrize("package", CHECKED)
def test_no_import_circles(package):
    graph = import_graph(PACKAGES)
    circles = [c for c in strongly_connected(graph) if any(m.split(".")[0] == package for m in c)]
    assert not circles, "import circles:\n" + "\n".join(describe(c, graph) for c in circles)


def test_the_graph_sees_lazy_relative_and_type_checking_imports(tmp_path):
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert strongly_connected(graph) == [["a", "b", "c"]]
    known = {"benchmarks": REPO / "benchmarks" / "__init__.py",
             "benchmarks.common": REPO / "benchmarks" / "common.py",
             "benchmarks.load_bench": REPO / "benchmarks" / "load_bench.py",
             "streampunct.core.options": REPO / "streampunct" / "options.py"}
    probe = tmp_path / "probe.py"  # read as the module benchmarks.probe
    probe.write_text("from typing import TYPE_CHECKING\n"
                     "if TYPE_CHECKING:\n"
                     "    from benchmarks.load_bench import LoadBenchConfig\n"
                     "def f():\n"
                     "    from . import common\n"
                     "    from streampunct.core.options import SessionOptions\n"
                     "    importlib.import_module('benchmarks')\n")
    found = imports_of("benchmarks.probe", probe, known)
    assert found == {"benchmarks.load_bench": 3, "benchmarks.common": 5, "streampunct.core.options": 6, "benchmarks": 7}


if __name__ == "__main__":
    graph = import_graph(PACKAGES)
    circles = strongly_connected(graph)
    print(f"{len(graph)} modules, {sum(len(v) for v in graph.values())} import edges, {len(circles)} circles")
    for component in circles:
        print(describe(component, graph))
    sys.exit(1 if circles else 0)
