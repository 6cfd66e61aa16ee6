import pyarrow as pa
import pytest
from tracebank.warehouse.errors import CorruptFileError, QueryError
from tracebank.warehouse.query import TABLES, connect, run_sql
from tracebank.warehouse.records import CollectionManifest
from tracebank.warehouse.schemas import SPANS, conform
from tracebank.warehouse.storage import Storage


def _commit_spans(wh, cid, names):
    folder = wh.collection_dir(cid)
    table = conform(pa.table({"collection_id": [cid] * len(names), "name": names}), SPANS)
    storage = Storage(wh)
    entry = storage.write_table(folder, "spans-0000.parquet", table, "spans")
    storage.commit_collection(folder, CollectionManifest(collection_id=cid, files=[entry]))
    return folder / "spans-0000.parquet"


def test_every_table_has_a_view_on_an_empty_warehouse(wh):
    con = connect(wh)
    for name in TABLES:
        assert con.execute(f"SELECT count(*) FROM {name}").fetchall() == [(0,)]


def test_views_union_committed_collections(wh):
    _commit_spans(wh, "c1", ["a", "b"])
    _commit_spans(wh, "c2", ["c"])
    out = run_sql(wh, "SELECT collection_id, count(*) n FROM spans GROUP BY 1 ORDER BY 1")
    assert out.to_pylist() == [{"collection_id": "c1", "n": 2}, {"collection_id": "c2", "n": 1}]


def test_parameters_are_bound_not_spliced(wh):
    _commit_spans(wh, "c1", ["a", "b"])
    _commit_spans(wh, "c2", ["c"])
    sql = "SELECT name FROM spans WHERE collection_id = $cid ORDER BY name"
    assert run_sql(wh, sql, {"cid": "c1"}).column("name").to_pylist() == ["a", "b"]
    assert run_sql(wh, sql, {"cid": "c1' OR '1'='1"}).num_rows == 0
    positional = run_sql(wh, "SELECT count(*) AS n FROM spans WHERE name IN (?, ?)", ["a", "c"])
    assert positional.to_pylist() == [{"n": 2}]


def test_a_missing_parameter_is_one_line(wh):
    with pytest.raises(QueryError) as err:
        run_sql(wh, "SELECT * FROM spans WHERE name = $name", {})
    assert "\n" not in err.value.one_line()


@pytest.mark.parametrize(
    "statement",
    [
        "DROP VIEW spans",
        "CREATE TABLE t (a INT)",
        "COPY (SELECT 1) TO '/tmp/x.csv'",
        "ATTACH 'x.duckdb'",
        "INSTALL httpfs",
        "SELECT 1; DELETE FROM spans",
    ],
)
def test_non_reads_are_refused(wh, statement):
    with pytest.raises(QueryError, match="only runs reads"):
        run_sql(wh, statement)


def test_truncated_parquet_is_named(wh):
    path = _commit_spans(wh, "c1", ["a"])
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(CorruptFileError, match=str(path)):
        run_sql(wh, "SELECT * FROM spans")


def test_syntax_error_is_one_line(wh):
    with pytest.raises(QueryError) as err:
        run_sql(wh, "SELEKT 1")
    assert "\n" not in err.value.one_line()
