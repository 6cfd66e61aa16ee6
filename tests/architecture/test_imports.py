"""The import direction: stages import `warehouse`, never each other; only the CLI imports all."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("collect", "transform", "train", "serve")
ORCHESTRATORS = ("loop", "tracebank_cli")
HEAVY = ("torch", "transformers", "trl", "peft", "unsloth", "vllm", "agentlightning", "datasets",
         "litellm")


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(module, at_top_level) for every import in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    top = set(map(id, tree.body))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, id(node) in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, id(node) in top))
    return out


def _py_files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def test_every_package_is_checked():
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "bench"}
    assert packages <= {"warehouse", *STAGES, *ORCHESTRATORS}


@pytest.mark.parametrize("stage", STAGES)
def test_stage_imports_no_other_stage(stage):
    others = [s for s in STAGES if s != stage] + list(ORCHESTRATORS)
    bad = [
        f"{path.relative_to(ROOT)} imports {mod}"
        for path in _py_files(stage)
        for mod, _ in _imports(path)
        if mod.split(".")[0] in others
    ]
    assert bad == []


def test_warehouse_imports_no_stage():
    bad = [
        f"{path.relative_to(ROOT)} imports {mod}"
        for path in _py_files("warehouse")
        for mod, _ in _imports(path)
        if mod.split(".")[0] in (*STAGES, *ORCHESTRATORS)
    ]
    assert bad == []


@pytest.mark.parametrize("package", ["warehouse", *ORCHESTRATORS, *STAGES])
def test_heavy_libraries_are_imported_lazily(package):
    bad = [
        f"{path.relative_to(ROOT)} imports {mod} at module level"
        for path in _py_files(package)
        for mod, top in _imports(path)
        if top and mod.split(".")[0] in HEAVY
    ]
    assert bad == []


def test_forbidden_import_is_detected(tmp_path):
    """The check itself can fail: a stage module importing another stage is caught."""
    bad = tmp_path / "x.py"
    bad.write_text("from transform import build\nimport torch\n")
    assert ("transform", True) in _imports(bad) and ("torch", True) in _imports(bad)
