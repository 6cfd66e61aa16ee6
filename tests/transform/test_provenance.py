"""A split file's provenance stamped into its open writer reads back as if written up front."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from tracebank.transform.provenance import metadata_fields, stamp
from tracebank.transform.writer import EXTRA_FIELDS, PARQUET_OPTIONS
from tracebank.warehouse import schemas

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


def _write(path, schema: pa.Schema, late: dict | None = None) -> None:
    writer = pq.ParquetWriter(path, schema, **PARQUET_OPTIONS)
    writer.write_table(_rows(3).cast(schema), row_group_size=3)
    writer.write_table(_rows(2).cast(schema), row_group_size=2)
    if late is not None:
        stamp(writer, schema, late)
    writer.close()


def test_a_stamped_file_reads_as_one_written_with_the_fields_up_front(tmp_path):
    early = {"dataset": "ds", "version": 3, "split": "train"}
    stamped, upfront = tmp_path / "stamped.parquet", tmp_path / "upfront.parquet"
    _write(stamped, SCHEMA.with_metadata(metadata_fields(early)), late={"content_hash": "ab12"})
    _write(upfront, SCHEMA.with_metadata(metadata_fields({**early, "content_hash": "ab12"})))

    footer = pq.read_metadata(stamped).metadata
    assert footer == pq.read_metadata(upfront).metadata
    assert footer[b"tracebank.content_hash"] == b"ab12" and footer[b"tracebank.version"] == b"3"
    read = pq.read_table(stamped)
    assert read.schema.equals(pq.read_table(upfront).schema, check_metadata=True)
    assert read.schema.metadata[b"tracebank.content_hash"] == b"ab12"
    assert read.equals(pq.read_table(upfront)) and read.num_rows == 5
    assert pq.ParquetFile(stamped).metadata.num_row_groups == 2


def test_stamping_nothing_new_leaves_the_metadata_as_it_was(tmp_path):
    schema = SCHEMA.with_metadata(metadata_fields({"dataset": "ds"}))
    _write(tmp_path / "a.parquet", schema, late={"served_models": None})
    _write(tmp_path / "b.parquet", schema)
    assert (
        pq.read_metadata(tmp_path / "a.parquet").metadata == pq.read_metadata(tmp_path / "b.parquet").metadata
    )
