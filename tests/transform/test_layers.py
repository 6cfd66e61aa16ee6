"""The transform stage's modules import only lower ones: no circle, counting imports inside functions."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

FOLDER = Path(__file__).resolve().parents[2] / "transform"
PACKAGE = "tracebank.transform"


def imported_modules(source: str) -> set[str]:
    """The modules of ``PACKAGE`` that ``source`` imports anywhere (top level, functions, TYPE_CHECKING)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif _lazy_exports(node):  # the package's lazily loaded exports (tracebank.core.lazy) are imports
            names = [k.value for k in node.args[1].keys if isinstance(k, ast.Constant)]  # type: ignore[attr-defined]
        else:
            continue
        found |= {n.removeprefix(PACKAGE + ".") for n in names if n.startswith(PACKAGE + ".")}
        found |= {"__init__" for n in names if n == PACKAGE}
    return found


def _lazy_exports(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "lazy_exports"
        and len(node.args) == 2
        and isinstance(node.args[1], ast.Dict)
    )


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """module -> the modules among ``sources`` it imports (``x`` in ``from pkg.mod import x`` is
    a module only when ``sources`` has it)."""
    return {name: imported_modules(text) & set(sources) - {name} for name, text in sources.items()}


def circle(graph: dict[str, set[str]]) -> list[str] | None:
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return None


def _sources() -> dict[str, str]:
    return {p.stem: p.read_text() for p in sorted(FOLDER.glob("*.py"))}


def test_transform_has_no_import_circle():
    assert circle(import_graph(_sources())) is None


def test_only_the_package_imports_the_entry():
    """The dispatcher is the top: every builder and helper sits below it."""
    graph = import_graph(_sources())
    assert {m for m, deps in graph.items() if "entry" in deps} == {"__init__"}
    assert [m for m, deps in graph.items() if "__init__" in deps] == []


@pytest.mark.parametrize("inside_function", [False, True])
def test_a_circle_is_found(inside_function):
    """The check itself can fail: an import back up, even one inside a function, is a circle."""
    back_up = "from tracebank.transform.entry import BUILDERS\n"
    if inside_function:
        back_up = "def f():\n    " + back_up
    sources = {
        "entry": "from tracebank.transform.recipe import build_recipe\n",
        "recipe": "import polars as pl\nfrom tracebank.transform.version import commit_version\n",
        "version": back_up,
    }
    assert sorted(set(circle(import_graph(sources)) or [])) == ["entry", "recipe", "version"]
