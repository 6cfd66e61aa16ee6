"""DuckDB over the warehouse: an in-memory connection with one view per table.

Views read only files that committed manifests list, so a query never sees a
writer's partial output and never blocks on a writer. No ``.duckdb`` file is
ever opened.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from tracebank.warehouse import catalog, schemas
from tracebank.warehouse.commit import check_sizes
from tracebank.warehouse.errors import CorruptFileError, QueryError
from tracebank.warehouse.layout import Warehouse
from tracebank.warehouse.records import Manifest
from tracebank.warehouse.storage import Storage

READ_ONLY_TYPES = {"SELECT", "EXPLAIN"}

TABLES = (
    "rollouts",
    "attempts",
    "spans",
    "llm_calls",
    "rewards",
    "messages",
    "dataset_rows",
    "collections",
    "datasets",
    "runs",
    "run_metrics",
    "rollout_rewards",
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


def _view_over_files(con: duckdb.DuckDBPyConnection, name: str, files: list[Path], schema: pa.Schema) -> None:
    if files:
        con.execute(
            f"CREATE VIEW {name} AS {_select_all(name)} "
            f"FROM read_parquet({_sql_list(files)}, union_by_name = true)"
        )
    else:
        _view_over_arrow(con, name, schema.empty_table())


def _internal_table(con: duckdb.DuckDBPyConnection, name: str, table: pa.Table) -> str:
    """Copy ``table`` into the internal schema (small: catalog rows, file lists); its full name."""
    con.register("_incoming", table)
    try:
        con.execute(f"CREATE TABLE {INTERNAL}.{name} AS SELECT * FROM _incoming")
    finally:
        con.unregister("_incoming")
    return f"{INTERNAL}.{name}"


def _view_over_arrow(con: duckdb.DuckDBPyConnection, name: str, table: pa.Table) -> None:
    source = _internal_table(con, name, table)
    con.execute(f"CREATE VIEW {name} AS {_select_all(name)} FROM {source}")


def _files_by_table(entries: Sequence[tuple[Path, Manifest]], check: bool) -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {}
    for folder, manifest in entries:
        if check:
            check_sizes(folder, manifest)
        for entry in manifest.files:
            out.setdefault(entry.table or "", []).append(folder / entry.path)
    return out


def _dataset_rows_view(con: duckdb.DuckDBPyConnection, wh: Warehouse, check: bool) -> None:
    keys: dict[str, list[Any]] = {"filename": [], "dataset": [], "version": [], "split": []}
    for folder, manifest in catalog.dataset_versions(wh):
        if check:
            check_sizes(folder, manifest)
        for entry in manifest.files:
            keys["filename"].append(str(folder / entry.path))
            keys["dataset"].append(manifest.name)
            keys["version"].append(catalog.version_number(folder))
            keys["split"].append(entry.split or "train")
    if not keys["filename"]:
        empty = pa.schema(
            [("dataset", pa.string()), ("version", pa.int64()), ("split", pa.string())]
            + list(schemas.DATASET_ROWS)
        )
        _view_over_arrow(con, "dataset_rows", empty.empty_table())
        return
    files = _internal_table(con, "dataset_files", pa.table(keys))
    con.execute(
        "CREATE VIEW dataset_rows AS SELECT f.dataset, f.version, f.split, r.* EXCLUDE (filename) "
        f"FROM read_parquet({_sql_list(keys['filename'])}, filename = true, union_by_name = true) r "
        f"JOIN {files} f USING (filename)"
    )


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
    cols = list(keep) + ["record"]
    arrays = {c: [r.get(c) for r in flat] for c in cols}
    table = pa.table({c: pa.array([], pa.string()) for c in cols}) if not flat else pa.table(arrays)
    _view_over_arrow(con, name, table)


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
                }
            )
    schema = pa.schema(
        [
            ("run_id", pa.string()),
            ("step", pa.int64()),
            ("epoch", pa.float64()),
            ("split", pa.string()),
            ("loss", pa.float64()),
            ("learning_rate", pa.float64()),
            ("grad_norm", pa.float64()),
            ("tokens", pa.int64()),
            ("time", pa.float64()),
        ]
    )
    _view_over_arrow(con, "run_metrics", pa.Table.from_pylist(rows, schema=schema))


def connect(wh: Warehouse, check: bool = True) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with a view for every warehouse table.

    ``check`` compares every committed file's size with its manifest first, so
    a truncated file is named up front instead of failing mid-query.
    """
    wh.check_format()
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")  # timestamps print the same on every machine
    con.execute(f"CREATE SCHEMA {INTERNAL}")
    bronze = _files_by_table(catalog.collections(wh), check)
    for name, schema in schemas.BRONZE.items():
        _view_over_files(con, name, bronze.get(name, []), schema)
    silver = _files_by_table(catalog.silver_caches(wh), check)
    for name, schema in schemas.SILVER.items():
        _view_over_files(con, name, silver.get(name, []), schema)
    _dataset_rows_view(con, wh, check)
    _catalog_view(con, "collections", [m.to_json() for _, m in catalog.collections(wh)], COLLECTION_KEYS)
    _catalog_view(con, "datasets", [m.to_json() for _, m in catalog.dataset_versions(wh)], DATASET_KEYS)
    _catalog_view(con, "runs", [r.to_json() for _, r in catalog.runs(wh)], RUN_KEYS)
    _run_metrics_view(con, wh)
    con.execute(ROLLOUT_REWARDS_SQL)
    return con


def ensure_read_only(sql: str) -> None:
    """Raise QueryError unless every statement in ``sql`` only reads."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(f"SQL syntax error: {_first_line(exc)}") from exc
    if not statements:
        raise QueryError("empty SQL statement")
    for st in statements:
        kind = st.type.name
        if kind not in READ_ONLY_TYPES:
            raise QueryError(
                f"refusing a {kind} statement: `tracebank sql` only runs reads",
                "use SELECT; only collect, transform and train change the warehouse",
            )


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def run_sql(wh: Warehouse, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> pa.Table:
    """Run a read-only statement over the warehouse views and return the result.

    ``params`` fill ``?`` / ``$name`` placeholders (DuckDB binds them: values never become SQL).
    """
    ensure_read_only(sql)
    con = connect(wh)
    try:
        return con.sql(sql, params=params).to_arrow_table()
    except duckdb.Error as exc:
        message = _first_line(exc)
        if "parquet" in message.lower() or "magic bytes" in message.lower():
            raise CorruptFileError(f"unreadable Parquet file: {message}") from exc
        raise QueryError(f"query failed: {message}") from exc
    finally:
        con.close()
