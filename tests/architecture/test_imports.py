"""The import rules: one namespace; stages import `warehouse`, never each other; heavy imports lazy."""

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("collect", "transform", "train", "serve", "view")
ORCHESTRATORS = ("loop", "cli")
# Folder in the repository -> the package it installs as.
FOLDERS = {"warehouse": "warehouse", **{s: s for s in STAGES}, "loop": "loop", "cli": "tracebank/cli"}
PACKAGES = ("warehouse", *STAGES, *ORCHESTRATORS)
HEAVY = ("torch", "transformers", "trl", "peft", "unsloth", "vllm", "agentlightning", "datasets", "litellm")
CODE_FOLDERS = (*FOLDERS.values(), "tracebank", "tests", "bench", "scripts")


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(module, at_top_level) for every absolute import in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    top = set(map(id, tree.body))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, id(node) in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, id(node) in top))
    return out


def _package_of(module: str) -> str | None:
    """``tracebank.collect.x`` -> ``collect``; None for anything outside tracebank."""
    parts = module.split(".")
    return parts[1] if parts[0] == "tracebank" and len(parts) > 1 else None


def _py_files(package: str) -> list[Path]:
    return sorted((ROOT / FOLDERS[package]).rglob("*.py"))


def test_every_package_is_checked():
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "bench", "tracebank"}
    assert packages <= set(PACKAGES)


def test_every_package_folder_is_installed_under_the_namespace():
    """pyproject maps each folder into `tracebank.` and lists every sub-package."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping, listed = tool["package-dir"], set(tool["packages"])
    for folder in ("warehouse", *STAGES, "loop"):
        assert mapping[f"tracebank.{folder}"] == folder
        for init in (ROOT / folder).rglob("__init__.py"):
            sub = init.parent.relative_to(ROOT / folder).parts
            assert ".".join(("tracebank", folder, *sub)) in listed, init


def test_nothing_imports_the_old_top_level_names():
    """Only `tracebank.<package>`: a bare `import train` would pick up a user's train.py."""
    bare = set(PACKAGES) | {"tracebank_cli"}
    bad = [
        f"{path.relative_to(ROOT)} imports {mod}"
        for folder in CODE_FOLDERS
        for path in sorted((ROOT / folder).rglob("*.py"))
        for mod, _ in _imports(path)
        if mod.split(".")[0] in bare
    ]
    assert bad == []


@pytest.mark.parametrize("stage", STAGES)
def test_stage_imports_no_other_stage(stage):
    others = [s for s in STAGES if s != stage] + list(ORCHESTRATORS)
    bad = [
        f"{path.relative_to(ROOT)} imports {mod}"
        for path in _py_files(stage)
        for mod, _ in _imports(path)
        if _package_of(mod) in others
    ]
    assert bad == []


def test_warehouse_imports_no_stage():
    bad = [
        f"{path.relative_to(ROOT)} imports {mod}"
        for path in _py_files("warehouse")
        for mod, _ in _imports(path)
        if _package_of(mod) in (*STAGES, *ORCHESTRATORS)
    ]
    assert bad == []


@pytest.mark.parametrize("package", PACKAGES)
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
    bad.write_text("from tracebank.transform import build\nimport torch\nimport train\n")
    found = _imports(bad)
    assert ("tracebank.transform", True) in found and ("torch", True) in found
    assert _package_of("tracebank.transform") == "transform" and ("train", True) in found


# -- committed data is read and written only through tracebank.warehouse ---------------------------
#: Modules that open Parquet files or write files atomically (the commit protocol's primitives).
DATA_IO_MODULES = ("pyarrow.parquet", "pyarrow.dataset", "tracebank.warehouse.commit")
#: Calls that open Parquet files by name in other libraries.
PARQUET_READERS = ("read_parquet", "scan_parquet", "from_parquet", "write_parquet", "sink_parquet")
#: File names of commits; only warehouse code builds paths to them.
COMMIT_FILES = ("manifest.json", "run.json", "metrics.jsonl", "FORMAT.json")
#: Every package but warehouse (tests and benchmarks may damage or inspect files on purpose).
DATA_IO_PACKAGES = tuple(p for p in PACKAGES if p != "warehouse")


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _data_io(path: Path, root: Path = ROOT) -> list[str]:
    """Where ``path`` touches committed data itself instead of through tracebank.warehouse."""
    tree = ast.parse(path.read_text(), str(path))
    docs = _docstrings(tree)
    found = [f"imports {mod}" for mod, _ in _imports(path) if mod.startswith(DATA_IO_MODULES)]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "pyarrow":
            found += [f"imports pyarrow.{a.name}" for a in node.names if a.name in ("parquet", "dataset")]
        elif isinstance(node, ast.Attribute) and node.attr in PARQUET_READERS:
            found.append(f"calls .{node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            text = node.value
            if any(f"{reader}(" in text for reader in PARQUET_READERS) or text in COMMIT_FILES:
                found.append(f"names {text[:40]!r}")
    return [f"{path.relative_to(root)}:{how}" for how in found]


@pytest.mark.parametrize("package", DATA_IO_PACKAGES)
def test_only_warehouse_opens_committed_files_or_writes_manifests(package):
    """Parquet reads, SQL over files, atomic writes and manifest names live in warehouse.storage."""
    assert [hit for path in _py_files(package) for hit in _data_io(path)] == []


def test_data_io_outside_the_warehouse_is_detected(tmp_path):
    """The check itself can fail: every way around warehouse.storage it knows of is caught."""
    bad = tmp_path / "x.py"
    bad.write_text(
        '"""read_parquet( in a docstring is fine."""\n'
        "import pyarrow.parquet as pq\n"
        "from pyarrow import parquet\n"
        "from tracebank.warehouse.commit import write_json_atomic\n"
        "import polars as pl\n"
        "def f(con, folder):\n"
        "    con.sql(\"SELECT * FROM read_parquet('x')\")\n"
        "    pl.scan_parquet(folder)\n"
        '    write_json_atomic(folder / "manifest.json", {})\n'
    )
    hits = [hit.split(":", 1)[1] for hit in _data_io(bad, root=tmp_path)]
    assert hits == [
        "imports pyarrow.parquet",
        "imports tracebank.warehouse.commit",
        "imports pyarrow.parquet",
        "names \"SELECT * FROM read_parquet('x')\"",
        "calls .scan_parquet",
        "names 'manifest.json'",
    ]
    assert _data_io(ROOT / "warehouse" / "storage.py") != []  # the owner itself would be caught
