"""The import rules: one namespace; stages import `warehouse`, never each other; heavy imports lazy."""

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("collect", "transform", "train", "serve", "view", "rescore")
ORCHESTRATORS = ("loop", "cli")
# Folder in the repository -> the package it installs as.
FOLDERS = {
    "core": "core",
    "warehouse": "warehouse",
    **{s: s for s in STAGES},
    "loop": "loop",
    "cli": "tracebank/cli",
}
PACKAGES = ("core", "warehouse", *STAGES, *ORCHESTRATORS)
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
    for folder in ("core", "warehouse", *STAGES, "loop"):
        assert mapping[f"tracebank.{folder}"] == folder
        for init in (ROOT / folder).rglob("__init__.py"):
            sub = init.parent.relative_to(ROOT / folder).parts
            assert ".".join(("tracebank", folder, *sub)) in listed, init
    for init in (ROOT / "tracebank").rglob("__init__.py"):  # the API and the CLI: a wheel has them too
        assert ".".join(init.parent.relative_to(ROOT).parts) in listed, init


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


# -- no import circles anywhere; layers inside warehouse/ -------------------------------------------
#: warehouse/'s modules, lowest layer first: a module imports only modules of lower layers.
WAREHOUSE_LAYERS: tuple[tuple[str, ...], ...] = (
    ("contract", "columns", "finite", "replay", "record_text"),
    ("schemas", "ducktables", "records", "layout"),
    ("bronze", "atomic"),
    ("bytestore",),
    ("s3store", "mirror"),
    ("location",),
    ("claims",),
    ("commit",),
    ("storage",),
    # Choosing a backend (a folder, or a bucket through its mirror) sits above the commit protocol:
    # committing and reading use the store they were handed, never pick one.
    ("backends",),
    ("catalog", "gc", "verify"),
    ("query",),
    ("listings",),
    ("__init__",),
)


def _module_name(path: Path, root: Path = ROOT) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[0] != "tracebank":
        parts = ["tracebank", *parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(files: list[Path], root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the tracebank modules it imports (anywhere in it, inside functions too). A
    package's own ``__init__`` that Python runs on the way to a submodule is not an edge."""
    names = {_module_name(p, root): p for p in files}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name in names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = {f"{node.module}.{a.name}" for a in node.names} & names.keys()
                plain = [a for a in node.names if f"{node.module}.{a.name}" not in names]
                edges |= subs | ({node.module} if plain and node.module in names else set())
            elif _is_lazy_exports(node):
                table = node.args[1]  # type: ignore[attr-defined]
                edges |= {k.value for k in table.keys if isinstance(k, ast.Constant)} & names.keys()
        graph[name] = edges - {name}
    return graph


def _is_lazy_exports(node: ast.AST) -> bool:
    """A package's table of lazily loaded exports (``tracebank.core.lazy``): its modules are imports."""
    return (
        isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "lazy_exports"
        and len(node.args) == 2
        and isinstance(node.args[1], ast.Dict)
    )


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _all_code() -> list[Path]:
    return sorted(p for folder in (*FOLDERS.values(), "tracebank") for p in (ROOT / folder).rglob("*.py"))


def test_no_package_has_an_import_circle():
    assert circles(import_graph(_all_code())) == []


def layer_violations(
    graph: dict[str, set[str]], layers: tuple[tuple[str, ...], ...], prefix: str
) -> list[str]:
    """Imports inside ``prefix`` that do not go strictly down ``layers`` (or name no layer)."""
    level = {
        f"{prefix}.{m}" if m != "__init__" else prefix: i for i, names in enumerate(layers) for m in names
    }
    bad = []
    for module, edges in sorted(graph.items()):
        if not (module == prefix or module.startswith(f"{prefix}.")):
            continue
        if module not in level:
            bad.append(f"{module} is in no layer")
            continue
        bad += [
            f"{module} imports {dep} (layer {level[dep]} is not below {level[module]})"
            for dep in sorted(edges)
            if dep in level and level[dep] >= level[module]
        ]
    return bad


def test_warehouse_modules_import_only_lower_layers():
    graph = import_graph(sorted((ROOT / "warehouse").rglob("*.py")))
    assert layer_violations(graph, WAREHOUSE_LAYERS, "tracebank.warehouse") == []


def test_the_circle_and_layer_checks_can_fail(tmp_path):
    """The checks themselves can fail: an import inside a function that closes a circle, and an
    import up the layers, are caught."""
    pkg = tmp_path / "warehouse"
    pkg.mkdir()
    (pkg / "low.py").write_text("def f():\n    from tracebank.warehouse import high\n")
    (pkg / "high.py").write_text("from tracebank.warehouse.low import f\n")
    graph = import_graph(sorted(pkg.glob("*.py")), root=tmp_path)
    assert circles(graph) == [["tracebank.warehouse.high", "tracebank.warehouse.low"]]
    layers = (("low",), ("high",))
    assert layer_violations(graph, layers, "tracebank.warehouse") == [
        "tracebank.warehouse.low imports tracebank.warehouse.high (layer 1 is not below 0)"
    ]


def test_core_imports_nothing_above_it():
    """Every layer may import tracebank.core (errors, events, text, the output guard...), so it
    imports no other tracebank package: no stage ever reaches the CLI's package through it."""
    bad = [
        f"{path.relative_to(ROOT)} imports {mod}"
        for path in _py_files("core")
        for mod, _ in _imports(path)
        if mod.startswith("tracebank") and not mod.startswith("tracebank.core")
    ]
    assert bad == []


def test_nothing_below_the_api_imports_the_top_level_package():
    """``tracebank`` itself (the API and the CLI) sits above every stage: no stage, nor the
    warehouse or core, imports ``tracebank.cli``, ``tracebank.api`` or names from ``tracebank``."""
    below = ("core", "warehouse", *STAGES, "loop")
    bad = [
        f"{path.relative_to(ROOT)} imports {mod}"
        for package in below
        for path in _py_files(package)
        for mod, _ in _imports(path)
        if mod == "tracebank" or mod.startswith(("tracebank.cli", "tracebank.api"))
    ]
    assert bad == []


LAZY_START_FORBIDDEN = ("polars", "duckdb", "pyarrow", "numpy", "torch", "transformers", "ray", "boto3")


def test_tracebank_help_imports_no_heavy_library():
    """`tracebank --help` (and so every command's start) loads a command's stage only when that
    command runs: none of the heavy libraries is imported by the CLI itself."""
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "from tracebank.cli.main import cli\n"
        "try:\n    cli(['--help'], prog_name='tracebank')\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {LAZY_START_FORBIDDEN!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_import_graph_counts_lazy_exports(tmp_path):
    pkg = tmp_path / "warehouse"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "from tracebank.core.lazy import lazy_exports\n"
        "__getattr__, __dir__, __all__ = lazy_exports(__name__, {'tracebank.warehouse.low': ('f',)})\n"
    )
    (pkg / "low.py").write_text("from tracebank.warehouse import f\n")
    graph = import_graph(sorted(pkg.glob("*.py")), root=tmp_path)
    assert graph["tracebank.warehouse"] == {"tracebank.warehouse.low"}
    assert circles(graph) == [["tracebank.warehouse", "tracebank.warehouse.low"]]
