"""Writing one split: rows materialised once, a piece at a time, committed atomically.

The split's rows are copied out of the token lists, encoded and written one
piece (about ``PIECE_TOKENS`` tokens, one Parquet row group) after another,
so memory does not grow with the split. The file is hashed for the manifest
as it is written and the rows digest fed piece by piece (it does not depend on
the cut), so nothing is read back. The file stays open (:func:`open_split`) until
the version's content hash, which digests every split, is known and stamped in.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from tracebank.transform.manifest import RowsDigest, rows_digest
from tracebank.transform.provenance import metadata_fields
from tracebank.transform.rows import RowTokens
from tracebank.warehouse import memory, schemas
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


@dataclass(frozen=True)
class OpenSplit:
    """A split whose rows are digested but whose files are not final yet.

    ``stamp(fields)`` adds the fields known only now (the content hash) to every
    file's key-value metadata; ``entries()`` are the files' manifest entries, once
    they are closed.
    """

    digest: str
    max_token_id: int | None
    stamp: Callable[[dict[str, Any]], None]
    entries: Callable[[], list[FileEntry]]


#: Opens one split's files in a reserved version folder (what ``transform.version`` calls):
#: (stack, storage, folder, split, row plan, provenance) -> the split, digested, not yet stamped.
SplitOpener = Callable[
    [contextlib.ExitStack[Any], Storage, Path, str, pl.DataFrame, dict[str, Any]], OpenSplit
]


def encode(table: pa.Table) -> pa.Buffer:
    """``table`` as Parquet bytes (see PARQUET_OPTIONS), for a version built whole in memory."""
    return encode_parquet(table, **PARQUET_OPTIONS)


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


# Rows are copied out and encoded a piece at a time (one Parquet row group each), so
# memory follows the piece, not the split.
PIECE_TOKENS = 4_000_000


def pieces(frame: pl.DataFrame, budget: int | None = None) -> list[pl.DataFrame]:
    """``frame`` cut into consecutive slices of about ``budget`` tokens (at least one row each)."""
    budget = budget or PIECE_TOKENS
    if frame.height == 0:
        return []
    ends = np.cumsum(frame.get_column("length").to_numpy())
    cuts = np.searchsorted(ends, np.arange(budget, int(ends[-1]), budget), side="left") + 1
    bounds = [0, *sorted(set(int(c) for c in cuts if 0 < c < frame.height)), frame.height]
    return [frame.slice(a, b - a) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def open_split(
    stack: contextlib.ExitStack[Any],
    storage: Storage,
    folder: Path,
    split: str,
    frame: pl.DataFrame,
    source: RowTokens,
    name: str | None = None,
    provenance: dict[str, Any] | None = None,
) -> OpenSplit:
    """Materialise ``frame``'s rows into ``folder/name`` (default ``<split>.parquet``), one
    Parquet file written a piece at a time, ``provenance`` in its key-value metadata; the file
    is closed (and renamed into place) when ``stack`` closes, after any :attr:`OpenSplit.stamp`."""
    name = name or f"{split}.parquet"
    digest = RowsDigest()
    max_ids: list[int] = []
    schema = pa.schema(list(schemas.DATASET_ROWS) + EXTRA_FIELDS)
    schema = schema.with_metadata(metadata_fields({**(provenance or {}), "split": split}))
    out = stack.enter_context(storage.parquet_stream(folder, name, "dataset_rows", schema, **PARQUET_OPTIONS))
    # Encoding a piece (Parquet, zstd, the file's sha256) runs on a helper thread, which Arrow and
    # hashlib let run without the GIL, while this one copies out and digests the next piece: two
    # cores busy, at most two pieces held.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="transform-write") as pool:
        writing: Future[None] | None = None
        for piece in pieces(frame):
            table, max_id = split_table(piece, source)
            if writing is not None:
                writing.result()
                memory.release()  # no write in flight: the allocators are this thread's alone
            writing = pool.submit(out.write, table.cast(schema), table.num_rows)
            digest.update(table)
            if max_id is not None:
                max_ids.append(max_id)
            del table
        if writing is not None:
            writing.result()
    memory.release()

    def entries() -> list[FileEntry]:
        assert out.entry is not None, "the file is still open"
        out.entry.split = split
        return [out.entry]

    def stamp(fields: dict[str, Any]) -> None:
        out.add_metadata(metadata_fields(fields))

    return OpenSplit(digest.hexdigest(), max(max_ids) if max_ids else None, stamp, entries)


def whole_split(
    table: pa.Table,
    _stack: contextlib.ExitStack[Any],
    storage: Storage,
    folder: Path,
    split: str,
    _frame: pl.DataFrame,
    provenance: dict[str, Any],
    table_name: str = "dataset_rows",
) -> OpenSplit:
    """``table``, a split built whole in memory: digested now, written as one file ``<split>.parquet``
    (of the warehouse table ``table_name``) when :attr:`OpenSplit.stamp` brings the fields known only
    then (the content hash). ``partial(whole_split, table)`` is a :data:`SplitOpener` (the plan
    ``_frame`` is ``table``'s)."""
    written: list[FileEntry] = []

    def stamp(fields: dict[str, Any]) -> None:
        stamped = table.replace_schema_metadata(metadata_fields({**provenance, "split": split, **fields}))
        entry = storage.write_buffer(folder, f"{split}.parquet", encode(stamped), table.num_rows, table_name)
        entry.split = split
        written.append(entry)

    def entries() -> list[FileEntry]:
        assert written, "the file is written when the content hash is known"
        return written

    # every token-id column: input_ids of SFT rows; prompt, chosen and rejected ids of pairs
    ids = [
        pc.max(pc.list_flatten(table.column(n))).as_py()
        for n in table.column_names
        if n.endswith("input_ids")
    ]
    max_id = max((i for i in ids if i is not None), default=None)
    return OpenSplit(rows_digest(table), max_id, stamp, entries)
