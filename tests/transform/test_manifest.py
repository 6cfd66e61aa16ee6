"""The version contract the train stage relies on: files, schema, manifest, hash, views."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from tracebank.core.errors import NotFoundError
from tracebank.transform import TransformConfig, transform
from tracebank.transform.errors import EmptyDatasetError
from tracebank.warehouse import schemas
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.query import run_sql
from tracebank.warehouse.storage import Storage

from tests.transform.oracle import scenario_warehouse


@pytest.fixture(scope="module")
def wh(tmp_path_factory):
    return scenario_warehouse(tmp_path_factory.mktemp("manifest"), seed=1, n_random=20)


@pytest.fixture(scope="module")
def version(wh):
    return transform(wh, TransformConfig(name="ds", val_fraction=0.2, seed=4))


def test_files_schema_and_manifest_keys(wh, version):
    m = version.manifest
    assert version.folder == version.folder.parent / "v0001" and m["version"] == 1 and m["name"] == "ds"
    for key in (
        "created_at",
        "tracebank_version",
        "content_hash",
        "params",
        "sources",
        "counts",
        "stats",
        "rows",
        "files",
    ):
        assert key in m
    assert [(f["path"], f["table"], f["split"]) for f in m["files"]] == [
        ("train.parquet", "dataset_rows", "train"),
        ("validation.parquet", "dataset_rows", "validation"),
    ]
    Storage(wh).verify_hashes(version.folder, version.record)
    total = 0
    for f in m["files"]:
        table = pq.read_table(version.folder / f["path"])
        assert table.schema.names[: len(schemas.DATASET_ROWS)] == schemas.DATASET_ROWS.names
        for field in schemas.DATASET_ROWS:
            assert table.schema.field(field.name).type == field.type
        assert table.num_rows == f["rows"]
        total += table.num_rows
    assert m["rows"] == total == m["stats"]["rows"]
    assert m["params"] == {
        "name": "ds",
        "collections": [],
        "top_fraction": 1.0,
        "seed": 4,
        "min_reward": None,
        "select_by": "triplet",
        "per_task": None,
        "val_fraction": 0.2,
        "max_length": None,
        "dedup": False,
        "merge": "none",
    }
    assert [s["collection_id"] for s in m["sources"]] == ["c1"] and len(m["sources"][0]["content_hash"]) == 64


def test_stats_match_the_rows(version):
    rows = []
    for f in version.manifest["files"]:
        rows += pq.read_table(version.folder / f["path"]).to_pylist()
    st = version.manifest["stats"]
    assert st["tokens"] == sum(len(r["input_ids"]) for r in rows)
    assert st["trained_tokens"] == sum(sum(1 for x in r["labels"] if x != -100) for r in rows)
    assert st["max_length"] == max(len(r["input_ids"]) for r in rows)
    assert st["max_token_id"] == max(max(r["input_ids"]) for r in rows)
    assert st["reward"]["min"] == min(r["reward"] for r in rows)
    assert st["reward"]["max"] == max(r["reward"] for r in rows)
    assert st["lengths"]["max"] == st["max_length"]
    assert all(r["attention_mask"] == [1] * len(r["input_ids"]) for r in rows)


def test_same_inputs_and_params_same_hash(wh, version):
    again = transform(wh, TransformConfig(name="ds", val_fraction=0.2, seed=4, force=True))
    other_name = transform(wh, TransformConfig(name="copy", val_fraction=0.2, seed=4))
    reseeded = transform(wh, TransformConfig(name="ds", val_fraction=0.2, seed=5))
    assert again.ref.version == version.ref.version + 1
    assert again.manifest["content_hash"] == version.manifest["content_hash"]
    assert other_name.manifest["content_hash"] == version.manifest["content_hash"]
    assert reseeded.manifest["content_hash"] != version.manifest["content_hash"]


def test_an_identical_transform_writes_nothing_unless_forced(wh, version):
    before = sorted(p.name for p in wh.dataset_dir("ds").iterdir())
    same = transform(wh, TransformConfig(name="ds", val_fraction=0.2, seed=4))
    # The newest version with this hash (an earlier test forced a second one).
    assert same.identical and same.record.content_hash == version.manifest["content_hash"]
    assert f"v{same.ref.version:04d}" in before
    assert same.summary() == (
        f"identical to {same.ref} (hash {version.manifest['content_hash'][:8]}): nothing written "
        "(--force writes a new version anyway)"
    )
    assert sorted(p.name for p in wh.dataset_dir("ds").iterdir()) == before
    forced = transform(wh, TransformConfig(name="ds", val_fraction=0.2, seed=4, force=True))
    assert not forced.identical and f"v{forced.ref.version:04d}" not in before


def test_split_files_carry_their_provenance(wh, version):
    import duckdb

    content_hash = version.manifest["content_hash"]
    assert {f["split"] for f in version.manifest["files"]} == {"train", "validation"}
    for f in version.manifest["files"]:
        path = version.folder / f["path"]
        footer = pq.read_metadata(path).metadata
        assert footer[b"tracebank.content_hash"] == content_hash.encode()
        # Arrow readers take the schema's metadata from ARROW:schema: it names the hash too.
        fields = {k.decode(): v.decode() for k, v in pq.read_schema(path).metadata.items()}
        assert fields == {k.decode(): v.decode() for k, v in footer.items() if k != b"ARROW:schema"}
        assert fields["tracebank.content_hash"] == content_hash
        assert fields["tracebank.dataset"] == "ds" and fields["tracebank.version"] == str(version.ref.version)
        assert fields["tracebank.split"] == f["split"]
        assert "tracebank.tracebank_version" in fields
        kv = duckdb.sql(f"SELECT key, value FROM parquet_kv_metadata('{path}')").fetchall()
        assert (b"tracebank.content_hash", content_hash.encode()) in kv
        assert [k for k, _ in kv].count(b"ARROW:schema") == 1
    Storage(wh).verify_hashes(version.folder, version.record)  # the manifest's sha256 is of the stamped file


def test_loads_with_hugging_face_datasets(version):
    from datasets import load_dataset

    files = {f["split"]: str(version.folder / f["path"]) for f in version.manifest["files"]}
    ds = load_dataset("parquet", data_files=files)
    assert ds["train"].num_rows + ds["validation"].num_rows == version.manifest["rows"]
    row = ds["train"][0]
    assert len(row["input_ids"]) == len(row["labels"]) == len(row["attention_mask"])
    assert {"input_ids", "attention_mask", "labels", "reward"} <= set(ds["train"].column_names)


def test_views_in_sql(wh, version):
    got = run_sql(
        wh,
        "SELECT dataset, version, split, count(*) AS n FROM dataset_rows WHERE dataset = 'ds' "
        "AND version = 1 GROUP BY ALL ORDER BY split",
    ).to_pylist()
    assert [(r["split"], r["n"]) for r in got] == [(f["split"], f["rows"]) for f in version.manifest["files"]]
    assert run_sql(wh, "SELECT count(*) AS n FROM datasets WHERE name = 'ds'").to_pylist()[0]["n"] >= 1
    calls = run_sql(wh, "SELECT count(*) AS n, count(reject_reason) AS bad FROM llm_calls").to_pylist()[0]
    assert calls["n"] > 50 and calls["bad"] == 2
    assert run_sql(wh, "SELECT count(*) AS n FROM rewards WHERE source = 'agentops'").to_pylist()[0]["n"] == 2
    msgs = run_sql(
        wh,
        "SELECT role, content FROM messages WHERE direction = 'output' AND content LIKE '%it''s%token_ids%'",
    ).to_pylist()
    assert msgs and msgs[0]["role"] == "assistant"


def test_unknown_collection_and_no_rows(wh, tmp_path):
    with pytest.raises(NotFoundError, match="no committed collection 'nope'"):
        transform(wh, TransformConfig(name="x", collections=("nope",)))
    empty = Warehouse(tmp_path / "empty").init()
    with pytest.raises(NotFoundError, match="no committed collection"):
        transform(empty, TransformConfig(name="x"))
    with pytest.raises(EmptyDatasetError):
        transform(wh, TransformConfig(name="none", min_reward=1e9))
    assert not wh.dataset_dir("none").exists() or not Storage(wh).dataset_versions("none")


def test_a_failed_write_leaves_no_version(wh, monkeypatch):
    import tracebank.transform.local_engine as local_engine

    real = local_engine.open_split
    calls = []

    def failing(stack, storage, folder, split, frame, source, **options):
        calls.append(split)
        if split == "validation":
            raise OSError("disk full")
        return real(stack, storage, folder, split, frame, source, **options)

    monkeypatch.setattr(local_engine, "open_split", failing)
    before = Storage(wh).dataset_versions("ds")
    with pytest.raises(OSError):
        transform(wh, TransformConfig(name="ds", val_fraction=0.2))
    assert len(calls) == 2
    assert Storage(wh).dataset_versions("ds") == before
    assert sorted(p.name for p in wh.dataset_dir("ds").iterdir()) == sorted(f.name for f, _ in before)


def test_content_hash_reads_values_not_parquet_bytes(version):
    import pyarrow as pa
    from tracebank.transform.manifest import RowsDigest, content_hash, rows_digest

    digests = []
    for f in version.manifest["files"]:
        table = pq.read_table(version.folder / f["path"])
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="snappy", use_dictionary=True, row_group_size=7)
        reencoded = pq.read_table(pa.BufferReader(sink.getvalue()))
        assert reencoded.column("input_ids").num_chunks > 1
        assert rows_digest(reencoded) == rows_digest(table)
        chunked = RowsDigest()
        for start in range(0, table.num_rows, 5):
            chunked.update(table.slice(start, 5))
        assert chunked.hexdigest() == rows_digest(table)
        digests.append({"split": f["split"], "rows": f["rows"], "digest": rows_digest(table)})
    config = TransformConfig(name="ds", val_fraction=0.2, seed=4)
    assert content_hash(config, version.manifest["sources"], digests) == version.manifest["content_hash"]
    first = pq.read_table(version.folder / "train.parquet")
    rewards = first.column("reward").to_pylist()
    changed = first.set_column(3, "reward", pa.array([rewards[0] + 1.0] + rewards[1:]))
    assert rows_digest(changed) != rows_digest(first)
    ids = first.column("input_ids").to_pylist()
    ids[0] = [ids[0][0] + 1] + ids[0][1:]
    same_lengths = first.set_column(0, "input_ids", pa.array(ids, pa.list_(pa.int32())))
    assert rows_digest(same_lengths) != rows_digest(first)


@pytest.mark.parametrize("n", [1, 2, 3, 10, 101, 4016])
def test_length_quantiles_are_numpys_to_the_last_bit(n):
    import numpy as np
    from tracebank.transform.manifest import _linear_quantiles

    rng = np.random.default_rng(n)
    for values in (rng.integers(1, 9000, n), rng.integers(1, 3, n), np.arange(n)[::-1]):
        assert _linear_quantiles(values, (0.5, 0.9, 0.99)) == np.quantile(values, [0.5, 0.9, 0.99]).tolist()
