"""`tracebank sql` cannot write or read outside the warehouse (issue 12, point 1).

Each bypass an attack found is a test: the engine (DuckDB with external access off, only the
committed files allowed, configuration locked) and the parser's statement types enforce it.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest
from click.testing import CliRunner
from tracebank.core.errors import QueryError
from tracebank.warehouse.query import connect, ensure_read_only, run_sql
from tracebank.warehouse.records import CollectionManifest
from tracebank.warehouse.schemas import SPANS, conform
from tracebank.warehouse.storage import Storage

from tracebank.cli.main import cli


@pytest.fixture
def committed(wh):
    folder = wh.collection_dir("c1")
    table = conform(pa.table({"collection_id": ["c1", "c1"], "name": ["a", "b"]}), SPANS)
    storage = Storage(wh)
    entry = storage.write_table(folder, "spans-0000.parquet", table, "spans")
    storage.commit_collection(folder, CollectionManifest(collection_id="c1", files=[entry]))
    return folder / "spans-0000.parquet"


def _sql(wh, statement):
    return CliRunner().invoke(cli, ["--warehouse", str(wh.root), "sql", statement])


def test_explain_analyze_copy_cannot_overwrite_a_committed_file(wh, committed):
    before = committed.read_bytes()
    out = _sql(wh, f"EXPLAIN ANALYZE COPY (SELECT 'x' AS x) TO '{committed}' (FORMAT parquet)")
    assert out.exit_code == 1
    assert out.stderr == (
        "Error: refusing a EXPLAIN COPY statement: `tracebank sql` only runs reads "
        "(use SELECT; only collect, transform and train change the warehouse)\n"
    )
    assert committed.read_bytes() == before
    assert run_sql(wh, "SELECT count(*) n FROM spans").to_pylist() == [{"n": 2}]


@pytest.mark.parametrize(
    "statement",
    [
        "EXPLAIN ANALYZE COPY (SELECT 1) TO '{path}'",
        "explain analyze copy (select 1) to '{path}'",
        "/* note */ EXPLAIN ANALYZE COPY (SELECT 1) TO '{path}'",
        "-- note\nEXPLAIN (ANALYZE, FORMAT json) COPY (SELECT 1) TO '{path}'",
        "EXPLAIN ANALYZE (FORMAT json) COPY (SELECT 1) TO '{path}'",
        "COPY (SELECT 1) TO '{path}' (FORMAT parquet, USE_TMP_FILE false)",
        "EXPORT DATABASE '{folder}'",
        "SELECT 1; COPY spans TO '{path}'",
        "PRAGMA enable_profiling",
        "SET enable_external_access = true",
        "RESET lock_configuration",
        "CALL pragma_version()",
    ],
)
def test_writing_forms_are_refused_by_the_parser(wh, committed, statement):
    before = committed.read_bytes()
    with pytest.raises(QueryError, match="only runs reads"):
        run_sql(wh, statement.format(path=committed, folder=committed.parent))
    assert committed.read_bytes() == before


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT * FROM read_text('/etc/hostname')",
        "SELECT * FROM read_csv('/etc/passwd', sep = ':')",
        "SELECT * FROM glob('/etc/*')",
        "SELECT * FROM read_parquet('{outside}')",
        "SELECT * FROM read_text('{tmp}')",
    ],
)
def test_reads_outside_the_committed_files_are_refused_by_the_engine(wh, committed, tmp_path, statement):
    outside = tmp_path / "outside.parquet"
    duckdb.sql(f"COPY (SELECT 1 AS x) TO '{outside}' (FORMAT parquet)")
    scratch = wh.tmp_dir / "scratch.txt"
    scratch.write_text("not committed")
    out = _sql(wh, statement.format(outside=outside, tmp=scratch))
    assert out.exit_code == 1
    [error] = [line for line in out.stderr.splitlines() if not line.startswith("Warning: ")]
    assert error.startswith("Error: refused: Cannot access ")
    assert "file system operations are disabled by configuration" in error
    assert error.endswith("(`tracebank sql` reads only the warehouse tables (see `tracebank sql --help`))")


def test_the_connection_itself_cannot_write_or_unlock(wh, committed, tmp_path):
    """Without the parser's check, the engine still refuses: the lock is DuckDB's."""
    con = connect(wh)
    with pytest.raises(duckdb.InvalidInputException, match="configuration has been locked"):
        con.execute("SET enable_external_access = true")
    with pytest.raises(duckdb.InvalidInputException, match="configuration has been locked"):
        con.execute("SET allowed_paths = ['/etc/hostname']")
    with pytest.raises(duckdb.PermissionException):
        con.execute(f"COPY (SELECT 1) TO '{tmp_path / 'x.csv'}'")
    with pytest.raises(duckdb.PermissionException):
        con.execute(f"COPY (SELECT 1) TO '{committed}' (FORMAT parquet)")  # through a temp file
    with pytest.raises(duckdb.PermissionException):
        con.execute(f"ATTACH '{tmp_path / 'x.duckdb'}'")
    with pytest.raises(duckdb.PermissionException):
        con.execute("INSTALL httpfs")
    assert not (tmp_path / "x.csv").exists() and not (tmp_path / "x.duckdb").exists()
    assert con.execute("SELECT count(*) FROM spans").fetchall() == [(2,)]


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT name FROM spans ORDER BY name",
        "EXPLAIN SELECT * FROM spans",
        "EXPLAIN ANALYZE SELECT * FROM spans",
        "EXPLAIN (FORMAT json) SELECT 1",
        "DESCRIBE spans",
        "SUMMARIZE spans",
        "WITH a AS (SELECT 1 AS x) SELECT * FROM a",
        "FROM spans",
    ],
)
def test_reads_still_run(wh, committed, statement):
    ensure_read_only(statement)
    assert run_sql(wh, statement).num_rows >= 1
