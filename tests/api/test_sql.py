"""`Warehouse.sql`'s result: rows without pyarrow, the same values in every form, bound
parameters, nothing but reads."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from tracebank.core.errors import QueryError

import tracebank
from tests.api.warehouses import build_base

STATEMENT = (
    "SELECT rollout_id, count(*) AS calls, sum(prompt_len) AS prompt FROM llm_calls GROUP BY 1 ORDER BY 1"
)


@pytest.fixture(scope="module")
def wh(tmp_path_factory):
    return tracebank.open(build_base(tmp_path_factory.mktemp("sql") / "warehouse"))


def test_rows_import_no_pyarrow(wh):
    script = textwrap.dedent(
        f"""
        import sys, tracebank
        rows = tracebank.open({str(wh.root)!r}).sql("SELECT count(*) FROM llm_calls").rows()
        assert rows[0][0] > 0, rows
        print(sorted(m for m in sys.modules if m == "pyarrow" or m.startswith("pyarrow.")))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_every_form_holds_the_rows(wh):
    rows = wh.sql(STATEMENT).rows()
    assert len(rows) > 4
    as_tuples = [tuple(r.values()) for r in wh.sql(STATEMENT).arrow().to_pylist()]
    assert as_tuples == rows
    assert wh.sql(STATEMENT).pl().rows() == rows
    assert [tuple(r) for r in wh.sql(STATEMENT).df().itertuples(index=False)] == rows
    assert wh.sql(STATEMENT).columns == ["rollout_id", "calls", "prompt"]


def test_rows_read_after_arrow_keep_every_column_and_duckdb_s_values(wh):
    statement = "SELECT 1 AS a, 2 AS a, MAP {'k': 1} AS m, INTERVAL 3 DAY AS i"
    fresh = wh.sql(statement).rows()
    result = wh.sql(statement)
    result.arrow()
    assert result.rows() == fresh
    assert len(fresh[0]) == len(result.columns) == 4 and fresh[0][2] == {"k": 1}


def test_polars_with_a_repeated_column_name_is_one_line(wh):
    with pytest.raises(QueryError) as raised:
        wh.sql("SELECT 1 AS a, 2 AS a").pl()
    assert "'a'" in raised.value.one_line() and "\n" not in raised.value.one_line()


def test_params_bind_as_values(wh):
    named = wh.sql("SELECT count(*) FROM llm_calls WHERE rollout_id = $r", {"r": "r1"}).rows()
    positional = wh.sql("SELECT count(*) FROM llm_calls WHERE rollout_id = ?", ["r1"]).rows()
    assert named == positional == [(2,)]
    hostile = "r1' OR '1'='1"
    assert wh.sql("SELECT count(*) FROM llm_calls WHERE rollout_id = ?", [hostile]).rows() == [(0,)]


@pytest.mark.parametrize(
    "statement",
    [
        "CREATE TABLE t AS SELECT 1",
        "COPY (SELECT 1) TO 'out.parquet'",
        "SELECT 1; DROP VIEW llm_calls",
        "ATTACH 'other.db'",
    ],
)
def test_a_write_statement_is_refused(wh, statement, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(QueryError):
        wh.sql(statement).rows()
    with pytest.raises(QueryError):
        wh.sql(statement).arrow()
    assert list(tmp_path.iterdir()) == []
