"""Integrity (issue 12, point 6): damage is named, stays in its own table, and never gives a
silent wrong answer; silver never outlives its collection; replacing silver is atomic for readers."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from tracebank.collect.silver import write_silver
from tracebank.warehouse.gc import gc
from tracebank.warehouse.query import connect, run_sql
from tracebank.warehouse.records import CollectionManifest
from tracebank.warehouse.schemas import BRONZE, SILVER, conform
from tracebank.warehouse.storage import Storage

from tests.fixtures.datasets import write_dataset
from tracebank.cli.main import cli


def _collection(wh, cid, names=("a", "b")):
    folder = wh.collection_dir(cid)
    storage = Storage(wh)
    files = []
    for table, schema in BRONZE.items():
        rows = conform(pa.table({"collection_id": [cid] * len(names), "rollout_id": list(names)}), schema)
        files.append(storage.write_table(folder, f"{table}-0000.parquet", rows, table))
    storage.commit_collection(folder, CollectionManifest(collection_id=cid, files=files))
    return folder


def _silver(wh, cid, n_calls=3):
    calls = conform(pa.table({"collection_id": [cid] * n_calls}), SILVER["llm_calls"])
    tables = {"llm_calls": calls, **{n: s.empty_table() for n, s in SILVER.items() if n != "llm_calls"}}
    return write_silver(wh, cid, tables)


def _cli(wh, *args):
    return CliRunner().invoke(cli, ["--warehouse", str(wh.root), *args])


def test_a_same_size_byte_flip_in_a_dataset_file_is_named_not_trained_on_or_read(wh):
    rows = [
        {"input_ids": [7000 + i, 2, 3], "attention_mask": [1, 1, 1], "labels": [-100, 2, 3]}
        for i in range(50)
    ]
    folder, _ = write_dataset(wh, "qa", rows)
    data = folder / "train.parquet"
    size = data.stat().st_size
    raw = pq.ParquetFile(data).metadata.row_group(0).column(0)
    assert raw.total_compressed_size > 0
    # Flip one byte of the first column's page data: the file keeps its size.
    blob = bytearray(data.read_bytes())
    blob[raw.data_page_offset + raw.total_compressed_size - 1] ^= 0xFF  # the last page's data
    data.write_bytes(bytes(blob))
    assert data.stat().st_size == size
    with pytest.raises(OSError, match="CRC checksum verification failed"):
        pq.read_table(data, page_checksum_verification=True)
    out = _cli(wh, "verify")
    assert out.exit_code == 1
    assert f"damaged {data}: content differs from its sha256 in the manifest\n" in out.stdout
    assert out.stdout.endswith("verify: 1 files in 1 commits checked; 1 damaged\n")
    assert out.stderr.startswith(f"Error: 1 damaged file(s) in {wh.root} (restore them")


def test_one_damaged_file_fails_only_its_own_table_with_its_name(wh):
    folder = _collection(wh, "c1")
    spans = folder / "spans-0000.parquet"
    spans.write_bytes(spans.read_bytes()[:-10])
    assert run_sql(wh, "SELECT count(*) n FROM rollouts").to_pylist() == [{"n": 2}]
    out = _cli(wh, "sql", "SELECT count(*) FROM spans")
    assert out.exit_code == 1
    size = spans.stat().st_size
    assert out.stderr == (
        f"Error: table spans: committed file {spans} is {size} bytes, manifest says {size + 10} "
        "(run `tracebank verify` to see every damaged file)\n"
    )
    verified = _cli(wh, "verify")
    assert f"damaged {spans}: {size} bytes, manifest says {size + 10}\n" in verified.stdout


def test_silver_of_a_collection_whose_manifest_was_deleted_is_not_counted(wh):
    folder = _collection(wh, "c1")
    _silver(wh, "c1")
    assert run_sql(wh, "SELECT count(*) n FROM llm_calls").to_pylist() == [{"n": 3}]
    (folder / "manifest.json").unlink()
    assert run_sql(wh, "SELECT count(*) n FROM llm_calls").to_pylist() == [{"n": 0}]
    assert run_sql(wh, "SELECT count(*) n FROM spans").to_pylist() == [{"n": 0}]
    assert "note: silver/c1 belongs to no committed collection (never shown)\n" in _cli(wh, "verify").stdout


def test_replacing_a_silver_cache_is_atomic_for_readers(wh):
    _collection(wh, "c1")
    first = _silver(wh, "c1", n_calls=3)
    reader = connect(wh)  # a query that planned against the first cache...
    second = _silver(wh, "c1", n_calls=5)  # ...while rebuild-silver replaces it
    assert reader.execute("SELECT count(*) FROM llm_calls").fetchall() == [(3,)]
    assert run_sql(wh, "SELECT count(*) n FROM llm_calls").to_pylist() == [{"n": 5}]
    old = {e.path for e in first.files} - {e.path for e in second.files}
    report = gc(wh, min_age_s=0)  # the replaced files go once no reader can need them
    assert {Path(p).name for p, _ in report.removed} == old


def test_a_manifest_that_is_valid_json_of_the_wrong_shape_is_one_line(wh):
    folder = _collection(wh, "c1")
    (folder / "manifest.json").write_text(json.dumps([{"path": "spans-0000.parquet"}]))
    out = _cli(wh, "sql", "--format", "csv", "SELECT count(*) AS n FROM spans")
    assert out.exit_code == 0 and out.stdout == "n\n0\n"  # only that commit is hidden
    manifest = folder / "manifest.json"
    assert out.stderr == (
        f"Warning: left out collections/c1: {manifest} is not a valid collection manifest: collection "
        "manifest should be an object, not list (it was edited or written by another program; restore it "
        "or remove its folder)\n"
    )
    verified = _cli(wh, "verify")
    assert f"damaged {manifest}: is not a valid collection manifest" in verified.stdout


def test_a_committed_file_replaced_by_a_symlink_is_damage_not_read(wh, tmp_path):
    """A co-worker swaps a committed file for a link (and edits its size in the manifest): readers
    refuse it as damage, in its own table only; they never read what it points to."""
    folder = _collection(wh, "c1")
    other = _collection(wh, "c2", names=("x", "y", "z"))
    elsewhere = tmp_path / "elsewhere.parquet"
    elsewhere.write_bytes((other / "spans-0000.parquet").read_bytes())
    spans = folder / "spans-0000.parquet"
    spans.unlink()
    spans.symlink_to(elsewhere)
    manifest = json.loads((folder / "manifest.json").read_text())
    for entry in manifest["files"]:
        if entry["path"] == spans.name:
            entry["bytes"] = elsewhere.stat().st_size
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert run_sql(wh, "SELECT count(*) n FROM rollouts").to_pylist() == [{"n": 5}]
    out = _cli(wh, "sql", "SELECT count(*) FROM spans")
    assert out.exit_code == 1
    assert out.stderr == (
        f"Error: table spans: committed file {spans} is a symbolic link "
        "(run `tracebank verify` to see every damaged file)\n"
    )
    verified = _cli(wh, "verify")
    assert verified.exit_code == 1 and f"damaged {spans}: " in verified.stdout
