"""The byte-store contract: a local folder, a mirror of a folder, a mirror of a real S3 server
(moto) and the S3 store itself behave the same for every operation the commit protocol uses.

Production reaches these through :func:`open_store` (a folder warehouse is a ``LocalStore``, an
``s3://`` one a ``MirrorStore`` over an ``S3Store``), so this is the seam every commit crosses.
"""

from __future__ import annotations

import hashlib
import threading

import pytest
from tracebank.core.errors import CorruptFileError, UsageError, WarehouseError
from tracebank.warehouse.backends import open_store, open_warehouse
from tracebank.warehouse.bytestore import LocalStore
from tracebank.warehouse.mirror import MirrorStore
from tracebank.warehouse.s3store import S3Store

KINDS = ["local", "mirror-of-folder", "mirror-of-s3", "s3"]
BYTE_STORES = KINDS[:3]  # the ones with a local folder (what Storage works through)


def _store(kind: str, request, tmp_path):
    if kind == "local":
        return open_store(tmp_path / "warehouse")
    if kind == "mirror-of-folder":
        return MirrorStore(LocalStore(tmp_path / "truth"), tmp_path / "mirror")
    bucket = request.getfixturevalue("s3_bucket")
    if kind == "s3":
        return S3Store(bucket, "team/warehouse")
    return open_store(f"s3://{bucket}/team/warehouse")


@pytest.fixture(params=KINDS)
def store(request, tmp_path):
    return _store(request.param, request, tmp_path)


@pytest.fixture(params=BYTE_STORES)
def byte_store(request, tmp_path):
    return _store(request.param, request, tmp_path)


def test_open_store_picks_the_backend(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEBANK_CACHE_DIR", str(tmp_path / "cache"))
    assert isinstance(open_store(tmp_path), LocalStore)
    assert isinstance(open_store(f"file://{tmp_path}"), LocalStore)
    s3 = open_store("s3://bucket-1/a/b/")
    assert isinstance(s3, MirrorStore) and isinstance(s3.remote, S3Store)
    assert (s3.remote.bucket, s3.remote.prefix, s3.uri) == ("bucket-1", "a/b", "s3://bucket-1/a/b")
    assert s3.root == tmp_path / "cache" / "warehouses" / "s3" / "bucket-1" / "a" / "b"
    with pytest.raises(UsageError, match="invalid S3 warehouse"):
        open_store("s3://ab/x")
    with pytest.raises(WarehouseError, match="no object store for gs://"):
        open_store("gs://bucket/x")


def test_a_folder_warehouse_works_through_the_local_store(tmp_path):
    wh = open_warehouse(tmp_path / "wh")
    assert isinstance(wh.store, LocalStore) and wh.store.root == wh.root == tmp_path / "wh"


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
    assert [(f.path, f.size) for f in store.walk("datasets/ds")] == [
        ("datasets/ds/v0001/manifest.json", 8),
        ("datasets/ds/v0001/train.parquet", 10),
        ("datasets/ds/v0002/train.parquet", 1),
    ]
    assert store.sha256("datasets/ds/v0001/train.parquet") == hashlib.sha256(b"x" * 10).hexdigest()
    assert store.sha256("datasets/ds/v0003/train.parquet") is None
    store.delete("datasets/ds/v0002/train.parquet")
    store.delete("datasets/ds/v0002/train.parquet")
    assert store.get("datasets/ds/v0002/train.parquet") is None
    assert store.children("datasets/ds") == ["v0001"]


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


def test_unsafe_keys_are_refused(store):
    for key in ("../x", "/etc/passwd", "a/../../x", "a//b", "a\\b", "a\x00b"):
        with pytest.raises(UsageError, match="unsafe warehouse key"):
            store.get(key)


def test_a_published_file_is_fetched_checked_from_anywhere(byte_store, tmp_path):
    data = b"committed bytes"
    sha = hashlib.sha256(data).hexdigest()
    path = byte_store.local_path("collections/c1/spans-0000.parquet")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    byte_store.publish("collections/c1/spans-0000.parquet")
    assert byte_store.get("collections/c1/spans-0000.parquet") == data
    assert byte_store.fetch("collections/c1/spans-0000.parquet", len(data), sha).read_bytes() == data
    if isinstance(byte_store, MirrorStore):  # another machine's mirror downloads and checks it
        other = MirrorStore(byte_store.remote, tmp_path / "other-machine")
        fetched = other.fetch("collections/c1/spans-0000.parquet", len(data), sha)
        assert fetched.read_bytes() == data and fetched.is_relative_to(tmp_path / "other-machine")
        with pytest.raises(CorruptFileError, match="does not match its manifest"):
            MirrorStore(byte_store.remote, tmp_path / "third").fetch(
                "collections/c1/spans-0000.parquet", len(data), "0" * 64
            )
    with pytest.raises(CorruptFileError):
        byte_store.fetch("collections/c1/spans-0000.parquet", len(data) + 1, sha)
    with pytest.raises(CorruptFileError, match="missing"):
        byte_store.fetch("collections/c1/attempts-0000.parquet", 1, sha)


def test_a_file_written_here_and_not_yet_published_reads_as_written(byte_store):
    byte_store.put("runs/r1/metrics.jsonl", b"1\n")
    with open(byte_store.local_path("runs/r1/metrics.jsonl"), "ab") as fh:
        fh.write(b"2\n")
    assert byte_store.get("runs/r1/metrics.jsonl") == b"1\n2\n"
    byte_store.publish("runs/r1/metrics.jsonl")
    assert byte_store.get("runs/r1/metrics.jsonl") == b"1\n2\n"


def test_credentials_come_from_the_environment_not_the_location(s3_bucket, monkeypatch):
    store = open_store(f"s3://{s3_bucket}/w")
    store.put("FORMAT.json", b"{}")
    assert "testing" not in store.uri
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "wrong")
    # moto accepts any key pair, so this only shows a fresh store reads the environment again.
    assert open_store(f"s3://{s3_bucket}/w").get("FORMAT.json") == b"{}"
