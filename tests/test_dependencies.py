"""Dependency directions between the four packages, read from every module's imports.

The runtime (``streampunct``) depends on ``engines`` only; ``engines`` on
nothing of ours (it takes files and arrays); ``training`` on the runtime and
engines; ``benchmarks`` on the runtime, engines and training (the method
ablation scores training checkpoints), never the other way round. Imports
inside functions count too: "lazily" is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("streampunct", "engines", "training", "benchmarks")
ALLOWED = {
    "streampunct": {"streampunct", "engines"},
    "engines": {"engines"},
    "training": {"training", "streampunct", "engines"},
    "benchmarks": {"benchmarks", "streampunct", "engines", "training"},
}


def imported_packages(path: Path) -> dict[str, int]:
    """Our top-level packages that ``path`` imports -> first line that does."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.ImportFrom):
            names = [path.relative_to(REPO).parts[0]]  # relative import: same package
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", ""))
              in ("import_module", "find_spec") and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names = [node.args[0].value]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in PACKAGES:
                found.setdefault(top, node.lineno)
    return found


def modules_of(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


@pytest.mark.parametrize("package", PACKAGES)
def test_dependency_directions(package):
    wrong = [
        f"{path.relative_to(REPO)}:{line} imports {dep}"
        for path in modules_of(package)
        for dep, line in imported_packages(path).items()
        if dep not in ALLOWED[package]
    ]
    assert not wrong, f"{package} may import only {sorted(ALLOWED[package])}:\n" + "\n".join(wrong)


def test_the_check_sees_lazy_and_dynamic_imports(tmp_path):
    probe = REPO / "streampunct" / "__init__.py"  # any module of ours, for the relative-import rule
    source = tmp_path / "m.py"
    source.write_text(
        "import os\n"
        "def f():\n"
        "    from training.pipeline import run\n"
        "    import benchmarks.common\n"
        "    importlib.import_module('engines.registry')\n"
    )
    assert imported_packages(source) == {"training": 3, "benchmarks": 4, "engines": 5}
    assert imported_packages(probe).keys() <= {"streampunct"}


# --- floors inside the packages ----------------------------------------------------------------

#: The runtime's floors, lowest first: a module imports its own floor or those below, never one
#: above; the three rooms of floor 3 (server, client, evaluation) do not import each other.
FLOORS = (
    ("streampunct.errors", "streampunct.labels"),
    ("streampunct.text",),
    ("streampunct.core", "streampunct.model"),
    ("streampunct.server", "streampunct.client", "streampunct.evaluation"),
    ("streampunct.api", "streampunct.commands", "streampunct.cli", "streampunct"),
)


def floor_of(module: str) -> tuple[int, str]:
    """(floor, room) of a runtime module: the longest prefix that FLOORS names."""
    best = None
    for level, rooms in enumerate(FLOORS):
        for room in rooms:
            if (module == room or module.startswith(room + ".")) and (best is None or len(room) > len(best[1])):
                best = (level, room)
    assert best is not None, f"{module} is on no floor of FLOORS"
    return best


def arrows_up(graph) -> list[str]:
    wrong = []
    for module, targets in sorted(graph.items()):
        if not module.startswith("streampunct"):
            continue
        level, room = floor_of(module)
        for target, line in sorted(targets.items()):
            if not target.startswith("streampunct"):
                continue
            t_level, t_room = floor_of(target)
            if t_level > level or (t_level == level == 3 and t_room != room):
                wrong.append(f"{module}:{line} imports {target} ({t_room} is not below {room})")
    return wrong


def test_runtime_floors_point_down():
    from tests.test_import_cycles import import_graph

    wrong = arrows_up(import_graph(("streampunct",)))
    assert not wrong, "arrows back up:\n" + "\n".join(wrong)


def test_engine_backends_import_nothing_from_the_build_side():
    from tests.test_import_cycles import import_graph

    graph = import_graph(("engines",))
    wrong = [f"{module}:{line} imports {target}"
             for module, targets in sorted(graph.items()) if not module.startswith("engines.build")
             for target, line in targets.items() if target.startswith("engines.build")]
    assert not wrong, "the runtime side of engines imports build tooling:\n" + "\n".join(wrong)


def test_the_floor_check_sees_an_arrow_up():
    graph = {"streampunct.core.wire": {"streampunct.server.app": 3},
             "streampunct.client.caption": {"streampunct.server.metrics": 7, "streampunct.core.wire": 2},
             "streampunct.server.app": {"streampunct.core.wire": 1}}
    assert arrows_up(graph) == [
        "streampunct.client.caption:7 imports streampunct.server.metrics (streampunct.server is not below "
        "streampunct.client)",
        "streampunct.core.wire:3 imports streampunct.server.app (streampunct.server is not below streampunct.core)",
    ]


def test_the_declared_license_ships_its_text():
    """pyproject's license-files exist and hold the license its SPDX expression names, so wheels
    and sdists carry it."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    files = [REPO / f for f in project["license-files"]]
    assert files and all(f.is_file() for f in files)
    text = files[0].read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
