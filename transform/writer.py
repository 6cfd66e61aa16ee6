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
from tracebank.core import memory
from tracebank.core.arrowutil import narrow_strings
from tracebank.core.machine import usable_cores
from tracebank.transform.manifest import RowsDigest, rows_digest
from tracebank.transform.provenance import metadata_fields
from tracebank.transform.rows import PieceBuffers, RowTokens
from tracebank.warehouse import layout, schemas
from tracebank.warehouse.records import FileEntry
from tracebank.warehouse.storage import ParquetStream, Storage, encode_parquet

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


def split_table(
    frame: pl.DataFrame, source: RowTokens, into: PieceBuffers | None = None
) -> tuple[pa.Table, int | None]:
    """The Parquet table of ``frame``'s rows (materialised in its order, into ``into``'s buffers
    when given: see :class:`PieceBuffers`) and their largest id."""
    input_ids, attention_mask, labels, max_id = source.materialize(frame, into)
    columns: dict[str, pa.Array] = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "labels": labels,
    }
    for field in list(schemas.DATASET_ROWS)[3:] + EXTRA_FIELDS:
        columns[field.name] = _arrow_column(frame.get_column(field.name), field.type)
    return pa.table(columns), max_id


def _arrow_column(series: pl.Series, kind: pa.DataType) -> pa.Array:
    """``series`` as an Arrow array of type ``kind``, cast by polars (Arrow's casts would import
    ``pyarrow.compute``, a tenth of a whole transform's time; see ``warehouse.arrowutil``)."""
    if kind == pa.string():
        arr = series.cast(pl.String).to_arrow()
        return narrow_strings(arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr)
    arr = series.cast(_POLARS_TYPES[kind]).to_arrow()
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    if arr.type != kind:
        raise TypeError(f"{series.name}: polars gave {arr.type}, the dataset schema wants {kind}")
    return arr


_POLARS_TYPES = {
    pa.int32(): pl.Int32,
    pa.int64(): pl.Int64,
    pa.float64(): pl.Float64,
    pa.float32(): pl.Float32,
}


# Rows are copied out and encoded a piece at a time (one Parquet row group each), so
# memory follows the piece, not the split. 2 M tokens (8 MB a column) costs no time against 4 M
# and holds ~50 MB less at every size (three 1 B-token runs each: peak 398 against 447 MiB).
PIECE_TOKENS = 2_000_000


def pieces(frame: pl.DataFrame, budget: int | None = None) -> list[pl.DataFrame]:
    """``frame`` cut into consecutive slices of about ``budget`` tokens (at least one row each)."""
    budget = budget or PIECE_TOKENS
    if frame.height == 0:
        return []
    return _cut(frame, lambda total: np.arange(budget, total, budget))


def _cut(frame: pl.DataFrame, targets: Callable[[int], np.ndarray]) -> list[pl.DataFrame]:
    """``frame`` sliced after the rows where the running token count reaches each of
    ``targets(total tokens)`` (empty slices left out)."""
    ends = np.cumsum(frame.get_column("length").to_numpy())
    cuts = np.searchsorted(ends, targets(int(ends[-1])), side="left") + 1
    bounds = [0, *sorted(set(int(c) for c in cuts if 0 < c < frame.height)), frame.height]
    return [frame.slice(a, b - a) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def writer_threads() -> int:
    """How many files of one split are encoded at once: a thread per usable core, at most 4
    (each holds a piece of rows and a Parquet writer's buffers)."""
    return min(usable_cores(), 4)


def shards(frame: pl.DataFrame, count: int) -> list[pl.DataFrame]:
    """``frame`` cut into at most ``count`` consecutive slices of about equal tokens."""
    if frame.height == 0 or count <= 1:
        return [frame]
    return _cut(frame, lambda total: np.arange(1, count) * (total / count))


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
    """Materialise ``frame``'s rows into ``folder``, ``provenance`` in every file's key-value
    metadata; the files are closed (and renamed into place) when ``stack`` closes, after any
    :attr:`OpenSplit.stamp`.

    The rows go to one file ``name`` when it is given (a Ray worker's piece), else to
    ``<split>.parquet`` when they fit in one piece, else to several files ``<split>-00000.parquet``
    on, encoded at once (one Parquet file is encoded by one thread, so this is how a split of
    several pieces uses every core): a file per piece when there are no more pieces than
    :func:`writer_threads`, else a file per thread, each a consecutive share of the rows.
    """
    schema = pa.schema(list(schemas.DATASET_ROWS) + EXTRA_FIELDS)
    schema = schema.with_metadata(metadata_fields({**(provenance or {}), "split": split}))
    cut = pieces(frame)
    threads = writer_threads()
    few = 1 < len(cut) <= threads  # a file per piece, each copied once
    parts = [frame] if name or len(cut) < 2 else (cut if few else shards(frame, threads))
    if name is None:
        name = layout.split_file(split) if len(parts) == 1 else None
    names = [name] if name else [layout.split_file(split, i) for i in range(len(parts))]
    outs = [
        stack.enter_context(storage.parquet_stream(folder, n, "dataset_rows", schema, **PARQUET_OPTIONS))
        for n in names
    ]
    if len(outs) == 1:
        digest, max_id = _write_pipelined(frame, source, outs[0], schema)
    elif few:
        digest, max_id = _write_piece_files(parts, source, outs, schema)
    else:
        digest, max_id = _write_shards(frame, parts, source, outs, schema)
    memory.release()

    def entries() -> list[FileEntry]:
        assert all(out.entry is not None for out in outs), "the files are still open"
        for out in outs:
            out.entry.split = split  # type: ignore[union-attr]
        return [out.entry for out in outs]  # type: ignore[misc]

    def stamp(fields: dict[str, Any]) -> None:
        for out in outs:
            out.add_metadata(metadata_fields(fields))

    return OpenSplit(digest, max_id, stamp, entries)


class _Digested:
    """The rows digest and the largest token id of a split's pieces, fed in row order."""

    def __init__(self) -> None:
        self.digest = RowsDigest()
        self.max_ids: list[int] = []

    def add(self, table: pa.Table, max_id: int | None) -> None:
        self.digest.update(table)
        if max_id is not None:
            self.max_ids.append(max_id)

    def result(self) -> tuple[str, int | None]:
        return self.digest.hexdigest(), max(self.max_ids) if self.max_ids else None


def _write_pipelined(
    frame: pl.DataFrame, source: RowTokens, out: ParquetStream, schema: pa.Schema
) -> tuple[str, int | None]:
    """Write ``frame``'s rows to ``out`` piece by piece: (rows digest, largest token id)."""
    digested = _Digested()
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
            writing = pool.submit(out.write, _conform(table, schema), table.num_rows)
            digested.add(table, max_id)
            del table
        if writing is not None:
            writing.result()
    return digested.result()


def _write_piece_files(
    cut: list[pl.DataFrame], source: RowTokens, outs: list[ParquetStream], schema: pa.Schema
) -> tuple[str, int | None]:
    """Write each piece of ``cut`` to its own file (as many files as threads at most): this thread
    copies out and digests the pieces in order, the pool encodes them at once."""
    digested = _Digested()
    with ThreadPoolExecutor(max_workers=len(outs), thread_name_prefix="transform-write") as pool:
        writing: list[Future[None]] = []
        try:
            for piece, out in zip(cut, outs, strict=True):
                table, max_id = split_table(piece, source)
                writing.append(pool.submit(out.write, _conform(table, schema), table.num_rows))
                digested.add(table, max_id)
                del table
        finally:
            for job in writing:
                job.result()
    return digested.result()


# The rows digest is fed in row order, so with several files written at once it reads the rows a
# second time, in smaller pieces (copying out is a small part of a piece's cost next to encoding it).
DIGEST_TOKENS = 1_000_000


def _write_shards(
    frame: pl.DataFrame,
    parts: list[pl.DataFrame],
    source: RowTokens,
    outs: list[ParquetStream],
    schema: pa.Schema,
) -> tuple[str, int | None]:
    """Write each of ``parts`` (consecutive shares of ``frame``) to its file on a thread of its
    own while this thread digests ``frame`` in row order: (rows digest, largest token id)."""
    with ThreadPoolExecutor(max_workers=len(outs), thread_name_prefix="transform-write") as pool:
        # Pieces (row groups) a share as large: the files in flight together hold what one would.
        budget = max(1, PIECE_TOKENS // len(outs))
        writing = [
            pool.submit(_write_shard, part, source, out, schema, budget)
            for part, out in zip(parts, outs, strict=True)
        ]
        try:
            digested = _Digested()
            buffers = PieceBuffers()
            for piece in pieces(frame, min(DIGEST_TOKENS, PIECE_TOKENS)):
                digested.add(*split_table(piece, source, buffers))
        finally:
            for job in writing:
                job.result()  # a failed write raises here (and the stack abandons the version)
    return digested.result()


def _write_shard(
    part: pl.DataFrame, source: RowTokens, out: ParquetStream, schema: pa.Schema, budget: int
) -> None:
    buffers = PieceBuffers()  # a piece's table is written (and dropped) before the next is copied
    for piece in pieces(part, budget):
        table, _ = split_table(piece, source, buffers)
        out.write(_conform(table, schema), table.num_rows)
        del table


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` (built with ``schema``'s types by :func:`split_table`) under ``schema``, its metadata
    included; a type that differs is refused (a cast would import ``pyarrow.compute``)."""
    return pa.Table.from_arrays(table.select(schema.names).columns, schema=schema)


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
        entry = storage.write_buffer(
            folder, layout.split_file(split), encode(stamped), table.num_rows, table_name
        )
        entry.split = split
        written.append(entry)

    def entries() -> list[FileEntry]:
        assert written, "the file is written when the content hash is known"
        return written

    import pyarrow.compute as pc  # only versions built whole in memory (pairs, the 1.0 path) need it

    # every token-id column: input_ids of SFT rows; prompt, chosen and rejected ids of pairs
    ids = [
        pc.max(pc.list_flatten(table.column(n))).as_py()
        for n in table.column_names
        if n.endswith("input_ids")
    ]
    max_id = max((i for i in ids if i is not None), default=None)
    return OpenSplit(rows_digest(table), max_id, stamp, entries)
