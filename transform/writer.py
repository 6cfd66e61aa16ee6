"""Writing one split: rows materialised once, encoded in memory, committed atomically.

Encoding Parquet is the largest single cost of a warm transform (about half
of it; pyarrow encodes a file's columns one after another). The split is
encoded into memory, hashed for the manifest from there and written with the
commit protocol, so the file is never read back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
from tracebank.transform.rows import RowTokens
from tracebank.warehouse import schemas
from tracebank.warehouse.records import FileEntry
from tracebank.warehouse.storage import Storage, encode_parquet

EXTRA_FIELDS = [
    pa.field("collection_id", pa.string()),
    pa.field("response_id", pa.string()),
    pa.field("calls", pa.int32()),
]
LIST_COLUMNS = ["input_ids", "attention_mask", "labels"]
# Small string columns repeat a lot. Token lists are written without dictionaries (they
# do not pay there) or min/max statistics (nobody filters on them); zstd level 1 (Arrow's
# default level) packs them about 4-5x at close to the speed of no compression. Token ids
# and labels use BYTE_STREAM_SPLIT, which zstd packs ~20% smaller and ~10% faster; it
# needs a Parquet reader from 2024 on (pyarrow >= 17, DuckDB >= 1.1), like this project's.
# (Per-column options name a list's leaf column, ``name.list.element``.)
PARQUET_OPTIONS: dict[str, Any] = {
    "write_page_checksum": True,  # CRCs that train's and inspect's readers verify
    "compression": "zstd",
    "compression_level": 1,
    "use_dictionary": ["rollout_id", "attempt_id", "collection_id"],
    "write_statistics": [
        n for n in schemas.DATASET_ROWS.names + [f.name for f in EXTRA_FIELDS] if n not in LIST_COLUMNS
    ],
    "column_encoding": {
        "input_ids.list.element": "BYTE_STREAM_SPLIT",
        "labels.list.element": "BYTE_STREAM_SPLIT",
    },
}


def split_table(frame: pl.DataFrame, source: RowTokens) -> tuple[pa.Table, int | None]:
    """The Parquet table of ``frame``'s rows (materialised in its order) and their largest id."""
    input_ids, attention_mask, labels, max_id = source.materialize(frame)
    columns: dict[str, pa.Array] = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "labels": labels,
    }
    for field in list(schemas.DATASET_ROWS)[3:] + EXTRA_FIELDS:
        columns[field.name] = frame.get_column(field.name).to_arrow().cast(field.type)
    return pa.table(columns), max_id


def encode(table: pa.Table) -> pa.Buffer:
    """``table`` as Parquet bytes (see PARQUET_OPTIONS)."""
    return encode_parquet(table, **PARQUET_OPTIONS)


def write_split(storage: Storage, folder: Path, split: str, table: pa.Table) -> FileEntry:
    """Write a split's materialised rows to ``folder/<split>.parquet`` (one file, atomically)."""
    entry = storage.write_buffer(folder, f"{split}.parquet", encode(table), table.num_rows, "dataset_rows")
    entry.split = split
    return entry
