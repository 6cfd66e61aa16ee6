import pyarrow as pa
import pytest
from tracebank.core.errors import CorruptFileError, QueryError
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


def test_times_are_utc_timestamps_and_internal_tables_are_hidden(wh):
    from tests.fixtures.bronze import commit_collection
    from tests.fixtures.proxy_spans import reward_span

    commit_collection(wh, [reward_span("ro-1", "at-1", 1, 0.5, 1_700_000_000.5)])
    shown = {r["name"] for r in run_sql(wh, "SHOW TABLES").to_pylist()}
    assert shown == set(TABLES)  # no `_..._arrow` registrations, no helper tables
    (row,) = run_sql(wh, "SELECT CAST(start_time AS VARCHAR) AS t FROM spans").to_pylist()
    assert row == {"t": "2023-11-14 22:13:20.5+00"}


def test_rollout_rewards_is_the_last_reward_of_the_latest_attempt(wh):
    from tracebank.collect import build_silver

    from tests.fixtures.bronze import commit_collection
    from tests.fixtures.proxy_spans import reward_span

    spans = [
        reward_span("ro-1", "at-1", 1, 0.1, 1.0),  # first attempt, superseded
        reward_span("ro-1", "at-2", 1, 0.4, 2.0),
        reward_span("ro-1", "at-2", 2, 0.7, 3.0),  # the latest attempt's last reward
        reward_span("ro-2", "at-3", 1, 0.2, 4.0),
    ]
    commit_collection(wh, spans)
    build_silver(wh)
    sql = "SELECT rollout_id, attempt_id, reward, rewards FROM rollout_rewards ORDER BY rollout_id"
    rows = run_sql(wh, sql)
    assert rows.to_pylist() == [
        {"rollout_id": "ro-1", "attempt_id": "at-2", "reward": 0.7, "rewards": 2},
        {"rollout_id": "ro-2", "attempt_id": "at-3", "reward": 0.2, "rewards": 1},
    ]
