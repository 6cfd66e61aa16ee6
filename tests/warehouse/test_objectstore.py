"""The object-store layer: a local folder and a real S3 server (moto) behave the same.

Every behaviour the commit protocol relies on is checked on both, so the S3
store is a drop-in for the folder: whole writes, exclusive creates (one winner
among racing writers), listings, and pyarrow/DuckDB reads of Parquet files.
"""

from __future__ import annotations

import threading

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from tracebank.warehouse.errors import UsageError, WarehouseError
from tracebank.warehouse.objectstore import LocalStore, S3Store, open_store


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    if request.param == "local":
        return open_store(tmp_path / "warehouse")
    bucket = request.getfixturevalue("s3_bucket")
    return open_store(f"s3://{bucket}/team/warehouse")


def test_open_store_picks_the_backend(tmp_path):
    assert isinstance(open_store(tmp_path), LocalStore)
    assert isinstance(open_store(f"file://{tmp_path}"), LocalStore)
    s3 = open_store("s3://bucket-1/a/b/")
    assert isinstance(s3, S3Store) and (s3.bucket, s3.prefix, s3.uri) == (
        "bucket-1",
        "a/b",
        "s3://bucket-1/a/b",
    )
    with pytest.raises(UsageError, match="invalid S3 warehouse"):
        open_store("s3://ab/x")
    with pytest.raises(WarehouseError, match="no object store for gs://"):
        open_store("gs://bucket/x")


def test_put_get_children_delete(store):
    assert store.get("datasets/ds/v0001/manifest.json") is None
    assert store.children("datasets") == []
    store.put("datasets/ds/v0001/manifest.json", b'{"a": 1}')
    store.put("datasets/ds/v0001/train.parquet", b"x" * 10)
    store.put("datasets/ds/v0002/train.parquet", b"y")
    store.put("datasets/ds/v0001/manifest.json", b'{"a": 2}')
    assert store.get("datasets/ds/v0001/manifest.json") == b'{"a": 2}'
    assert store.children("datasets/ds") == ["v0001", "v0002"]
    assert store.children("datasets/ds/v0001") == ["manifest.json", "train.parquet"]
    assert store.children("datasets") == ["ds"]
    store.delete("datasets/ds/v0002/train.parquet")
    store.delete("datasets/ds/v0002/train.parquet")
    assert store.get("datasets/ds/v0002/train.parquet") is None


def test_exclusive_create_has_exactly_one_winner(store):
    winners: list[int] = []
    start = threading.Barrier(8)

    def claim(i: int) -> None:
        start.wait()
        if store.create_exclusive("datasets/ds/v0001/CLAIM", str(i).encode()):
            winners.append(i)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1
    assert store.get("datasets/ds/v0001/CLAIM") == str(winners[0]).encode()
    assert not store.create_exclusive("datasets/ds/v0001/CLAIM", b"late")
    assert store.create_exclusive("datasets/ds/v0002/CLAIM", b"next")


def test_duckdb_scans_parquet_through_a_pyarrow_dataset(store):
    table = pa.table({"rollout_id": ["a", "b", "c"], "reward": [0.5, 1.0, 0.25]})
    fs, root = store.arrow()
    for name, part in (("p0", table.slice(0, 2)), ("p1", table.slice(2))):
        fs.create_dir(f"{root}/silver", recursive=True)
        with fs.open_output_stream(f"{root}/silver/{name}.parquet") as out:
            pq.write_table(part, out)
    dataset = ds.dataset([f"{root}/silver/p0.parquet", f"{root}/silver/p1.parquet"], filesystem=fs)
    con = duckdb.connect()
    con.register("rewards", dataset)
    assert con.execute("SELECT count(*), sum(reward) FROM rewards WHERE reward > 0.3").fetchone() == (2, 1.5)


def test_credentials_come_from_the_environment_not_the_location(s3_bucket, monkeypatch):
    store = open_store(f"s3://{s3_bucket}/w")
    store.put("FORMAT.json", b"{}")
    assert "testing" not in store.uri
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "wrong")
    # moto accepts any key pair, so this only shows a fresh store reads the environment again.
    assert open_store(f"s3://{s3_bucket}/w").get("FORMAT.json") == b"{}"
