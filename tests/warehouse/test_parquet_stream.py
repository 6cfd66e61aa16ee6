"""Metadata added to a streamed Parquet file before it closes reads back as if written up front."""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pyarrow.parquet as pq
from tracebank.transform.writer import EXTRA_FIELDS, PARQUET_OPTIONS
from tracebank.warehouse import schemas
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.storage import Storage

SCHEMA = pa.schema(list(schemas.DATASET_ROWS) + EXTRA_FIELDS)


def _rows(n: int) -> pa.Table:
    columns = {}
    for field in SCHEMA:
        if pa.types.is_list(field.type):
            columns[field.name] = pa.array([[i, i + 1] for i in range(n)], field.type)
        elif pa.types.is_string(field.type):
            columns[field.name] = pa.array([f"r{i}" for i in range(n)], field.type)
        else:
            columns[field.name] = pa.array(range(n), pa.int64()).cast(field.type)
    return pa.table(columns, schema=SCHEMA)


def _write(tmp_path, name: str, metadata: dict, late: dict | None = None):
    wh = Warehouse(tmp_path / "wh").init()
    storage = Storage(wh)
    schema = SCHEMA.with_metadata(metadata)
    with storage.parquet_stream(wh.tmp_dir, name, "dataset_rows", schema, **PARQUET_OPTIONS) as out:
        out.write(_rows(3).cast(schema), row_group_size=3)
        out.write(_rows(2).cast(schema), row_group_size=2)
        if late is not None:
            out.add_metadata(late)
    return wh.tmp_dir / name, out.entry


def test_metadata_added_last_reads_as_if_the_schema_held_it(tmp_path):
    early = {b"tracebank.dataset": b"ds", b"tracebank.version": b"3"}
    stamped, entry = _write(tmp_path, "stamped.parquet", early, late={b"tracebank.content_hash": b"ab12"})
    upfront, _ = _write(tmp_path, "upfront.parquet", {**early, b"tracebank.content_hash": b"ab12"})

    footer = pq.read_metadata(stamped).metadata
    assert footer == pq.read_metadata(upfront).metadata
    assert list(footer).count(b"ARROW:schema") == 1
    assert footer[b"tracebank.content_hash"] == b"ab12" and footer[b"tracebank.version"] == b"3"
    read = pq.read_table(stamped)
    assert read.schema.equals(pq.read_table(upfront).schema, check_metadata=True)
    assert read.schema.metadata[b"tracebank.content_hash"] == b"ab12"
    assert read.equals(pq.read_table(upfront)) and read.num_rows == 5
    assert pq.ParquetFile(stamped).metadata.num_row_groups == 2
    # The manifest entry is the stamped file's: hashed as written, footer included.
    assert entry is not None and entry.bytes == stamped.stat().st_size and entry.rows == 5
    assert entry.sha256 == hashlib.sha256(stamped.read_bytes()).hexdigest()


def test_adding_nothing_new_leaves_the_metadata_as_it_was(tmp_path):
    a, _ = _write(tmp_path, "a.parquet", {b"tracebank.dataset": b"ds"}, late={})
    b, _ = _write(tmp_path, "b.parquet", {b"tracebank.dataset": b"ds"})
    assert pq.read_metadata(a).metadata == pq.read_metadata(b).metadata
