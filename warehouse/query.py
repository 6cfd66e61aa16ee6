"""DuckDB over the warehouse: an in-memory connection with one view per table.

Views read only files that committed manifests list, so a query never sees a
writer's partial output and never blocks on a writer. No ``.duckdb`` file is
ever opened.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import duckdb
from tracebank.core.errors import CorruptFileError, QueryError, TracebankError, first_line, warn_damage
from tracebank.warehouse import catalog, columns
from tracebank.warehouse.columns import Columns
from tracebank.warehouse.contract import SILVER_VERSION
from tracebank.warehouse.ducktables import create_table, typed_column
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import Manifest
from tracebank.warehouse.storage import Storage

if TYPE_CHECKING:
    import pyarrow as pa

T = TypeVar("T")

#: How much memory one SQL connection may use before DuckDB spills or fails (one line, not an OOM).
DEFAULT_MEMORY_LIMIT = "2GB"
#: Overrides DEFAULT_MEMORY_LIMIT (DuckDB's syntax: ``4GB``, ``512MB``).
MEMORY_LIMIT_VARIABLE = "TRACEBANK_SQL_MEMORY_LIMIT"

READ_ONLY_TYPES = {"SELECT", "EXPLAIN"}  # EXPLAIN of a SELECT; see _statement_kind

TABLES = (
    "rollouts",
    "attempts",
    "spans",
    "events",
    "llm_calls",
    "rewards",
    "messages",
    "dataset_rows",
    "preference_rows",
    "reward_scores",
    "collections",
    "datasets",
    "runs",
    "run_metrics",
    "rollout_rewards",
    "merge_diagnostics",
)

#: Epoch-second columns as stored; the views show them as UTC timestamps (ISO in every format).
TIME_COLUMNS = {
    "rollouts": ("start_time", "end_time"),
    "attempts": ("start_time", "end_time", "last_heartbeat_time"),
    "spans": ("start_time", "end_time"),
    "llm_calls": ("start_time",),
    "rewards": ("start_time",),
}

#: Schema of the helper tables the views need; SHOW TABLES lists only the main schema.
INTERNAL = "internal"

#: Each rollout's final reward: the last reward (by sequence, then time) of its latest attempt
#: (NULL when that attempt has none). The key joining it to the other tables is rollout_id.
ROLLOUT_REWARDS_SQL = """
CREATE VIEW rollout_rewards AS
WITH latest AS (
  SELECT rollout_id, arg_max(attempt_id, sequence_id) AS attempt_id,
         arg_max(collection_id, sequence_id) AS collection_id
  FROM attempts GROUP BY rollout_id
), given AS (
  SELECT rollout_id, attempt_id, arg_max(value, (sequence_id, start_time)) AS reward, count(*) AS rewards
  FROM rewards GROUP BY rollout_id, attempt_id
)
SELECT l.rollout_id, l.attempt_id, l.collection_id, g.reward, coalesce(g.rewards, 0) AS rewards
FROM latest l LEFT JOIN given g USING (rollout_id, attempt_id)
"""


def _sql_list(paths: Iterable[Path]) -> str:
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths) + "]"


def _select_all(name: str) -> str:
    """``SELECT *`` with the table's epoch-second columns as timestamps."""
    times = TIME_COLUMNS.get(name, ())
    if not times:
        return "SELECT *"
    return "SELECT * REPLACE (" + ", ".join(f"to_timestamp({c}) AS {c}" for c in times) + ")"


def _view_over_files(con: duckdb.DuckDBPyConnection, name: str, files: list[Path], cols: Columns) -> None:
    """A view over ``files``; a file DuckDB cannot read turns only this table into one that
    fails, naming the file, when it is read (the other tables stay readable)."""
    if not files:
        _view_over_columns(con, name, cols)
        return
    try:
        con.execute(
            f"CREATE VIEW {name} AS {_select_all(name)} "
            f"FROM read_parquet({_sql_list(files)}, union_by_name = true)"
        )
    except duckdb.Error as exc:
        _damaged_view(con, name, cols, [f"unreadable Parquet file: {first_line(exc)}"])


def _internal_table(
    con: duckdb.DuckDBPyConnection, name: str, cols: Columns, values: Sequence[Sequence[Any]] = ()
) -> str:
    """A small table (catalog rows, file lists) in the internal schema; its full name."""
    create_table(con, f"{INTERNAL}.{name}", cols, values)
    return f"{INTERNAL}.{name}"


def _view_over_columns(
    con: duckdb.DuckDBPyConnection, name: str, cols: Columns, values: Sequence[Sequence[Any]] = ()
) -> None:
    source = _internal_table(con, name, cols, values)
    con.execute(f"CREATE VIEW {name} AS {_select_all(name)} FROM {source}")


def _files_by_table(
    storage: Storage,
    entries: Sequence[tuple[Path, Manifest]],
    check: bool,
    damaged: dict[str, list[str]],
    only: set[str] | None = None,
) -> dict[str, list[Path]]:
    """The committed files of each table (of the tables in ``only``, when given); with ``check``,
    a file whose size differs from its manifest (or that is gone) is left out and named in
    ``damaged`` under its table instead."""
    out: dict[str, list[Path]] = {}
    for folder, manifest in entries:
        for entry in manifest.files:
            table = entry.table or ""
            if only is not None and table not in only:
                continue
            problem = storage.unreadable(folder, entry) if check else None
            if problem is not None:
                damaged.setdefault(table, []).append(problem)
                continue
            out.setdefault(table, []).append(folder / entry.path)
    return out


def _damaged_view(con: duckdb.DuckDBPyConnection, name: str, cols: Columns, problems: list[str]) -> None:
    """A view of the table's columns that fails, naming the damaged file, when it is read."""
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    message = f"table {name}: {problems[0]}{more}".replace("'", "''")
    columns = _internal_table(con, f"{name}_columns", cols)
    con.execute(
        f"CREATE VIEW {name} AS SELECT c.* FROM (SELECT 1 AS one WHERE error('{message}')) t "
        f"LEFT JOIN {columns} c ON true"
    )


_VERSION_TAGS: Columns = (("dataset", "string"), ("version", "int64"), ("split", "string"))
#: Views over other views: reading one reads these.
_DEPENDS = {"rollout_rewards": {"attempts", "rewards"}}


def _with_dependencies(tables: set[str]) -> set[str]:
    return tables.union(*(_DEPENDS.get(t, set()) for t in tables))


def tables_read(sql: str) -> set[str] | None:
    """The tables the statements of ``sql`` read, as DuckDB's parser tells; None when it cannot
    tell (``SHOW TABLES``, catalog functions): then every table is needed."""
    con = duckdb.connect(":memory:")
    try:
        names: set[str] = set()
        for statement in duckdb.extract_statements(sql):
            found = con.get_table_names(statement.query)
            if not found:
                return None
            names |= found
        return names
    except duckdb.Error:
        return None
    finally:
        con.close()


@dataclass(frozen=True)
class _VersionedTable:
    """A table read from every committed version of datasets (or reward layers), each row tagged
    with its version's name and number (and split, for datasets)."""

    view: str
    table: str
    label: str
    empty: Columns


_VERSIONED = (
    _VersionedTable("dataset_rows", "dataset_rows", "dataset", _VERSION_TAGS + columns.DATASET_ROWS),
    _VersionedTable("preference_rows", "preference_rows", "dataset", _VERSION_TAGS + columns.PREFERENCE_ROWS),
    _VersionedTable(
        "reward_scores",
        "reward_scores",
        "layer",
        (("layer", "string"), ("version", "int64"), *columns.REWARD_SCORES),
    ),
    _VersionedTable(
        "merge_diagnostics",
        "merge_diagnostics",
        "dataset",
        (("dataset", "string"), ("version", "int64"), *columns.MERGE_DIAGNOSTICS),
    ),
)


def _versions_of(wh: Warehouse, spec: _VersionedTable) -> list[tuple[str, Path, Manifest]]:
    if spec.label == "layer":
        return [(m.name, folder, m) for folder, m in Storage(wh).reward_layers()]
    return [(m.name, folder, m) for folder, m in Storage(wh).dataset_versions()]


def _versioned_view(
    con: duckdb.DuckDBPyConnection, wh: Warehouse, spec: _VersionedTable, check: bool
) -> list[str]:
    """Create the view ``spec`` names; the files it reads."""
    keys: dict[str, list[Any]] = {"filename": [], spec.label: [], "version": []}
    if "split" in dict(spec.empty):
        keys["split"] = []
    problems: list[str] = []
    storage = Storage(wh)
    for name, folder, manifest in _versions_of(wh, spec):
        for entry in manifest.files:
            if (entry.table or "dataset_rows") != spec.table:
                continue
            problem = storage.unreadable(folder, entry) if check else None
            if problem is not None:
                problems.append(problem)
            keys["filename"].append(str(folder / entry.path))
            keys[spec.label].append(name)
            keys["version"].append(catalog.version_number(folder))
            if "split" in keys:
                keys["split"].append(entry.split or "train")
    if problems:
        _damaged_view(con, spec.view, spec.empty, problems)
        return []
    if not keys["filename"]:
        _view_over_columns(con, spec.view, spec.empty)
        return []
    key_types = {"filename": "string", spec.label: "string", "version": "int64", "split": "string"}
    declared = tuple((k, key_types[k]) for k in keys)
    files = _internal_table(con, f"{spec.view}_files", declared, list(keys.values()))
    tags = ", ".join(f"f.{k}" for k in keys if k != "filename")
    try:
        con.execute(
            f"CREATE VIEW {spec.view} AS SELECT {tags}, r.* EXCLUDE (filename) "
            f"FROM read_parquet({_sql_list(keys['filename'])}, filename = true, union_by_name = true) r "
            f"JOIN {files} f USING (filename)"
        )
    except duckdb.Error as exc:
        _damaged_view(con, spec.view, spec.empty, [f"unreadable Parquet file: {first_line(exc)}"])
        return []
    return keys["filename"]


def _flatten(record: dict[str, Any], keep: tuple[str, ...]) -> dict[str, Any]:
    row = {k: record.get(k) for k in keep}
    for k, v in row.items():
        if isinstance(v, dict | list):
            row[k] = json.dumps(v, sort_keys=True)
    row["record"] = json.dumps(record, sort_keys=True, default=str)
    return row


def _catalog_view(
    con: duckdb.DuckDBPyConnection, name: str, rows: list[dict[str, Any]], keep: tuple[str, ...]
) -> None:
    flat = [_flatten(r, keep) for r in rows]
    cols = [*keep, "record"]
    typed = [typed_column([r.get(c) for r in flat]) for c in cols]
    declared = tuple((c, notation) for c, (notation, _) in zip(cols, typed, strict=True))
    _view_over_columns(con, name, declared, [values for _, values in typed])


COLLECTION_KEYS = ("collection_id", "created_at", "tag", "store_url", "counts", "seconds")
DATASET_KEYS = ("name", "version", "created_at", "content_hash", "rows", "params", "sources")
RUN_KEYS = (
    "run_id",
    "status",
    "dataset",
    "base_model",
    "backend",
    "output_dir",
    "started_at",
    "finished_at",
    "summary",
    "error",
)


#: What a DPO run logs besides its loss (null for SFT runs).
_DPO_METRICS = ("rewards_chosen", "rewards_rejected", "rewards_margin", "rewards_accuracy")


def _run_metrics_view(con: duckdb.DuckDBPyConnection, wh: Warehouse) -> None:
    rows: list[dict[str, Any]] = []
    storage = Storage(wh)
    for folder, record in storage.runs():
        for event in storage.run_metrics(folder):
            rows.append(
                {
                    "run_id": record.run_id,
                    "step": event.get("step"),
                    "epoch": event.get("epoch"),
                    "split": event.get("split", "train"),
                    "loss": event.get("loss"),
                    "learning_rate": event.get("learning_rate"),
                    "grad_norm": event.get("grad_norm"),
                    "tokens": event.get("tokens"),
                    "time": event.get("time"),
                    **{name: event.get(name) for name in _DPO_METRICS},
                }
            )
    cols: Columns = (
        ("run_id", "string"),
        ("step", "int64"),
        ("epoch", "float64"),
        ("split", "string"),
        ("loss", "float64"),
        ("learning_rate", "float64"),
        ("grad_norm", "float64"),
        ("tokens", "int64"),
        ("time", "float64"),
        *((name, "float64") for name in _DPO_METRICS),
    )
    _view_over_columns(con, "run_metrics", cols, [[row[name] for row in rows] for name, _ in cols])


def connect(wh: Warehouse, check: bool = True, only: set[str] | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with a view for every warehouse table.

    ``check`` compares every committed file's size with its manifest first, so
    a truncated file is named up front instead of failing mid-query. ``only``: the data
    tables a statement reads (see :func:`tables_read`); the others are left empty, so a
    mirror of a warehouse on object storage fetches just what the statement needs.
    """
    only = None if only is None else _with_dependencies(only)
    wh.check_format()
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")  # timestamps print the same on every machine
    _limit_resources(con, wh)
    con.execute(f"CREATE SCHEMA {INTERNAL}")
    damaged: dict[str, list[str]] = {}
    storage = Storage(wh)
    collections = storage.collections()
    bronze = _files_by_table(storage, collections, check, damaged, only)
    # Silver of a collection whose manifest is gone is not shown: its bronze no longer exists.
    collection_ids = {folder.name for folder, _ in collections}
    caches = [(folder, m) for folder, m in storage.silver_caches() if folder.name in collection_ids]
    _warn_missing_silver(collection_ids, caches, only)
    silver = _files_by_table(storage, caches, check, damaged, only)
    for name, cols in (*columns.BRONZE.items(), *columns.SILVER.items()):
        if name in damaged:
            _damaged_view(con, name, cols, damaged[name])
        else:
            _view_over_files(con, name, (bronze if name in columns.BRONZE else silver).get(name, []), cols)
    gold = []
    for spec in _VERSIONED:
        if only is None or spec.view in only:
            gold += _versioned_view(con, wh, spec, check)
        else:
            _view_over_columns(con, spec.view, spec.empty)
    _catalog_view(con, "collections", [m.to_json() for _, m in collections], COLLECTION_KEYS)
    _catalog_view(con, "datasets", [m.to_json() for _, m in Storage(wh).dataset_versions()], DATASET_KEYS)
    _catalog_view(con, "runs", [r.to_json() for _, r in Storage(wh).runs()], RUN_KEYS)
    _run_metrics_view(con, wh)
    con.execute(ROLLOUT_REWARDS_SQL)
    readable = [str(p) for files in (*bronze.values(), *silver.values()) for p in files] + gold
    lock_down(con, readable)
    return con


def _warn_missing_silver(
    collection_ids: set[str], caches: list[tuple[Path, Manifest]], only: set[str] | None
) -> None:
    """Say which committed collections the silver tables leave out (never built, or built by
    another SILVER_VERSION), instead of letting them read as zero rows."""
    if only is not None and not only & set(columns.SILVER):
        return
    current = {folder.name for folder, m in caches if getattr(m, "silver_version", None) == SILVER_VERSION}
    missing = sorted(collection_ids - current)
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        warn_damage(
            f"the silver tables (llm_calls, rewards, messages) leave out collection {missing[0]}{more}: "
            "its silver cache is missing or stale; the next `tracebank collect` rebuilds it "
            f"(or now: `tracebank rebuild-silver --collection {missing[0]}`)"
        )


def _limit_resources(con: duckdb.DuckDBPyConnection, wh: Warehouse) -> None:
    """A memory cap (DuckDB's default is 80% of RAM) and a spill folder in the warehouse's scratch,
    never the working directory (``./.tmp``, readable by whoever shares it)."""
    spill = wh.tmp_dir / f"duckdb-{os.getpid()}"
    con.execute("SET memory_limit = ?", [os.environ.get(MEMORY_LIMIT_VARIABLE) or DEFAULT_MEMORY_LIMIT])
    con.execute("SET temp_directory = ?", [str(spill)])


def lock_down(con: duckdb.DuckDBPyConnection, readable: list[str]) -> None:
    """Let ``con`` open only the files in ``readable`` and change no setting from now on.

    DuckDB refuses every other file (reads outside the warehouse, ``ATTACH``, extensions, ``COPY``
    to anywhere else) once external access is off; ``lock_configuration`` refuses the ``SET`` that
    would turn it back on. DuckDB's allow-list does not tell reading from writing, so a write onto a
    committed file itself is refused by :func:`ensure_read_only`, which classifies statements with
    DuckDB's own parser.
    """
    con.execute("SET allowed_paths = ?", [readable])
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def ensure_read_only(sql: str) -> None:
    """Raise QueryError unless every statement in ``sql`` only reads."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(f"SQL syntax error: {first_line(exc)}") from exc
    if not statements:
        raise QueryError("empty SQL statement")
    for st in statements:
        kind = _statement_kind(st)
        if kind not in READ_ONLY_TYPES:
            raise QueryError(
                f"refusing a {kind} statement: `tracebank sql` only runs reads",
                "use SELECT; only collect, transform and train change the warehouse",
            )


def _statement_kind(st: Any) -> str:
    """The parser's type of ``st``; for EXPLAIN, ``EXPLAIN <type of the statement it explains>``."""
    kind = str(st.type.name)
    if kind != "EXPLAIN":
        return kind
    inner_sql = _explained(st.query)
    try:
        inner = duckdb.extract_statements(inner_sql) if inner_sql is not None else []
    except duckdb.Error:
        inner = []
    if len(inner) != 1:
        return "unrecognised EXPLAIN"  # a form this reading does not know: refused
    inner_kind = _statement_kind(inner[0])
    return "EXPLAIN" if inner_kind == "SELECT" else f"EXPLAIN {inner_kind}"


def _explained(sql: str) -> str | None:
    """The statement ``EXPLAIN [ANALYZE] [(options)] <statement>`` explains (``EXPLAIN ANALYZE``
    runs it, so it is what counts), found with DuckDB's own tokenizer: comments, nested ones
    included, are skipped exactly as DuckDB skips them (a pattern that read ``/* /* */ ... */``
    differently could be shown a SELECT where DuckDB runs a COPY). None if it is not of that form."""
    try:
        tokens = [pos for pos, kind in duckdb.tokenize(sql) if kind != duckdb.token_type.comment]
    except duckdb.Error:
        return None
    words = [_token_text(sql, pos) for pos in tokens]
    if not words or words[0].upper() != "EXPLAIN":
        return None
    i, depth = 1, 0
    while i < len(words):
        word = words[i].upper()
        if depth:
            depth += word.count("(") - word.count(")")
        elif word in ("ANALYZE", "ANALYSE"):
            pass
        elif word.startswith("("):
            depth = word.count("(") - word.count(")")
        else:
            return sql[tokens[i] :]
        i += 1
    return None


def _token_text(sql: str, pos: int) -> str:
    """The token of ``sql`` that starts at ``pos`` (up to the next space, comment or bracket)."""
    m = _TOKEN_TEXT.match(sql, pos)
    return m.group(0) if m else sql[pos]


_TOKEN_TEXT = re.compile(r"[(]+|[)]+|[^\s()/-]+")


def duckdb_error(exc: duckdb.Error) -> TracebankError:
    """What a DuckDB failure over the warehouse views means, as one of tracebank's errors: a
    damaged view names its file; a refused file or setting is the sandbox; the rest is the query."""
    message = first_line(exc)
    if isinstance(exc, duckdb.InvalidInputException):
        message = message.removeprefix("Invalid Input Error: ")
        if message.startswith("table ") and ("committed file" in message or "unreadable" in message):
            return CorruptFileError(message, "run `tracebank verify` to see every damaged file")
        return QueryError(f"query failed: {first_line(exc)}")
    if isinstance(exc, duckdb.PermissionException):
        return QueryError(
            f"refused: {message.removeprefix('Permission Error: ')}",
            "`tracebank sql` reads only the warehouse tables (see `tracebank sql --help`)",
        )
    if "parquet" in message.lower() or "magic bytes" in message.lower():
        return CorruptFileError(f"unreadable Parquet file: {message}")
    return QueryError(f"query failed: {message}")


@dataclass(frozen=True)
class ResultRows:
    """A statement's result as Python values, which is all `tracebank sql` prints: building it
    needs no pyarrow (0.1-0.15 s of a fresh process's start). Quacks like the parts of a
    ``pyarrow.Table`` the printers use."""

    column_names: list[str]
    rows: list[tuple[Any, ...]]

    @property
    def num_rows(self) -> int:
        return len(self.rows)

    def slice(self, offset: int = 0, length: int | None = None) -> ResultRows:
        end = None if length is None else offset + length
        return ResultRows(self.column_names, self.rows[offset:end])

    def to_pylist(self) -> list[dict[str, Any]]:
        return [dict(zip(self.column_names, row, strict=True)) for row in self.rows]


def _run(
    wh: Warehouse,
    sql: str,
    params: Sequence[Any] | Mapping[str, Any] | None,
    fetch: Callable[[duckdb.DuckDBPyRelation], T],
) -> T:
    ensure_read_only(sql)
    con = connect(wh, only=tables_read(sql))
    try:
        return fetch(con.sql(sql, params=params))
    except duckdb.Error as exc:
        raise duckdb_error(exc) from exc
    finally:
        con.close()


def run_sql(wh: Warehouse, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> pa.Table:
    """Run a read-only statement over the warehouse views and return the result.

    ``params`` fill ``?`` / ``$name`` placeholders (DuckDB binds them: values never become SQL).
    """
    return _run(wh, sql, params, lambda rel: rel.to_arrow_table())


def sql_rows(wh: Warehouse, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> ResultRows:
    """:func:`run_sql` as Python values, without importing pyarrow (what `tracebank sql` prints)."""
    return _run(wh, sql, params, lambda rel: ResultRows(list(rel.columns), rel.fetchall()))
