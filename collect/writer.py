"""Turning fetched spans into Parquet files while fetching goes on.

Spans are taken apart into column lists as they arrive, converted to Arrow in
batches (cheap slices of work between store round trips) and written in files
of ``rows_per_file`` on a worker thread, so the event loop keeps the store's queue full instead of
pausing for one big conversion at the end. Files go through the commit
protocol; none is visible until the collection's manifest names it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pyarrow as pa
from tracebank.collect import fastjson
from tracebank.warehouse import bronze, layout, schemas
from tracebank.warehouse.records import FileEntry
from tracebank.warehouse.storage import Storage

BATCH_ROWS = 2048
# A spans file is also cut at this much JSON text, so collect holds about one file's worth of
# spans (plus one being written) however long the trajectories: token-id reprs make a
# single proxied call tens of kilobytes.
FILE_BYTES = 64 << 20
# Files being written at once; a store that answers faster than Parquet encodes waits here.
MAX_WRITES = 1

_SPAN_JSON = frozenset(bronze.JSON_SPAN_FIELDS)


class _Columns:
    """Span rows as one Python list per column of ``schemas.SPANS``.

    Each attempt's spans are taken apart as they arrive: JSON fields become text at once
    and the span dicts are dropped, so between conversions the writer holds only strings
    and numbers, which the garbage collector never scans (thousands of live span dicts
    made every young-generation collection walk them all).
    """

    def __init__(self) -> None:
        self.lists: list[list[Any]] = [[] for _ in schemas.SPANS]
        self.rows = 0
        self.bytes = 0

    def add(self, spans: list[dict[str, Any]], plain: bool) -> None:
        encode = fastjson.encoder(plain)
        for field, values in zip(schemas.SPANS, self.lists, strict=True):
            name = field.name
            if name == "collection_id":
                continue  # filled in by table()
            if name in _SPAN_JSON:
                texts = [encode(s.get(name)) for s in spans]
                self.bytes += sum(len(t) for t in texts if t is not None)
                values.extend(texts)
            else:
                values.extend([s.get(name) for s in spans])
        self.rows += len(spans)

    def table(self, collection_id: str) -> pa.Table:
        """The rows taken so far as a table (and the lists emptied)."""
        arrays = []
        for field, values in zip(schemas.SPANS, self.lists, strict=True):
            if field.name == "collection_id":
                values = [collection_id] * self.rows
            arrays.append(pa.array(values, type=field.type))
        self.lists = [[] for _ in schemas.SPANS]
        self.rows = 0
        self.bytes = 0
        return pa.Table.from_arrays(arrays, schema=schemas.SPANS)


def spans_arrow(spans: list[dict[str, Any]], collection_id: str, plain: bool = False) -> pa.Table:
    """``bronze.spans_table(spans, collection_id)``, built column by column.

    The generic builder costs ~60 us per span; collect converts every span of a store,
    so this one works a column at a time with one reused JSON encoder. ``plain`` spans
    (see :mod:`collect.fastjson`) get their JSON columns from orjson: the same values,
    compact text; others get exactly ``bronze.to_json``'s text.
    """
    columns = _Columns()
    columns.add(spans, plain)
    return columns.table(collection_id)


class SpanFileWriter:
    """Takes span dicts; converts them in batches; writes ``spans-NNNN.parquet`` files."""

    def __init__(self, storage: Storage, folder: Path, collection_id: str, rows_per_file: int) -> None:
        self.storage = storage
        self.folder = folder
        self.collection_id = collection_id
        self.rows_per_file = rows_per_file
        self.entries: list[FileEntry] = []
        self.rows = 0
        self._pending = _Columns()
        self._tables: list[pa.Table] = []
        self._table_rows = 0
        self._table_bytes = 0
        self._index = 0
        self._writes: list[asyncio.Task[None]] = []

    def _convert_pending(self) -> None:
        if self._pending.rows:
            self._table_bytes += self._pending.bytes
            table = self._pending.table(self.collection_id)
            self._tables.append(table)
            self._table_rows += table.num_rows

    def add(self, spans: list[dict[str, Any]], plain: bool = False) -> None:
        """Take one attempt's spans (``plain``: see :mod:`collect.fastjson`); start writing a file
        once enough rows are waiting."""
        self._pending.add(spans, plain)
        self.rows += len(spans)
        full = self._table_rows + self._pending.rows >= self.rows_per_file
        if full or self._table_bytes + self._pending.bytes >= FILE_BYTES:
            self._convert_pending()
            self._start_write()
        elif self._pending.rows >= BATCH_ROWS:
            self._convert_pending()

    def _start_write(self) -> None:
        table = pa.concat_tables(self._tables) if len(self._tables) > 1 else self._tables[0]
        self._tables, self._table_rows, self._table_bytes = [], 0, 0
        name = layout.bronze_file("spans", self._index)
        self._index += 1
        self._writes.append(asyncio.ensure_future(self._write(name, table)))

    async def _write(self, name: str, table: pa.Table) -> None:
        entry = await asyncio.to_thread(self.storage.write_table, self.folder, name, table, "spans")
        self.entries.append(entry)

    async def drain(self) -> None:
        """Wait while more than ``MAX_WRITES`` files are being written (keeps memory bounded)."""
        while sum(not w.done() for w in self._writes) > MAX_WRITES:
            await asyncio.wait([w for w in self._writes if not w.done()], return_when=asyncio.FIRST_COMPLETED)

    async def finish(self) -> list[FileEntry]:
        """Write what is left; wait for every file; return their manifest entries in file order."""
        self._convert_pending()
        if self._tables:
            self._start_write()
        if self._writes:
            await asyncio.gather(*self._writes)
        return sorted(self.entries, key=lambda e: e.path)

    async def abandon(self) -> None:
        """Wait for writes in flight (so no thread outlives the run); their files stay uncommitted."""
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)


class EventFileWriter:
    """Takes Agent Lightning 1.0 event rows an attempt at a time; writes ``events-NNNN.parquet``
    files cut between attempts at ``rows_per_file`` rows or :data:`FILE_BYTES` of Arrow data, so
    an import of any size holds about one file's worth of events (a chat file of 100k
    conversations is as flat as one of 1k)."""

    def __init__(self, storage: Storage, folder: Path, collection_id: str, rows_per_file: int) -> None:
        self.storage = storage
        self.folder = folder
        self.collection_id = collection_id
        self.rows_per_file = rows_per_file
        self.entries: list[FileEntry] = []
        self.rows = 0
        self._pending: list[dict[str, Any]] = []
        self._tables: list[pa.Table] = []
        self._table_rows = 0
        self._table_bytes = 0

    def add(self, events: list[dict[str, Any]]) -> None:
        """Take one attempt's event rows; write a file once enough are waiting."""
        self._pending += events
        self.rows += len(events)
        if len(self._pending) >= BATCH_ROWS:
            self._convert_pending()
        if self._table_rows + len(self._pending) >= self.rows_per_file or self._table_bytes >= FILE_BYTES:
            self._write_file()

    def _convert_pending(self) -> None:
        if self._pending:
            table = bronze.events_table(self._pending, self.collection_id)
            self._pending = []
            self._tables.append(table)
            self._table_rows += table.num_rows
            self._table_bytes += table.nbytes

    def _write_file(self) -> None:
        self._convert_pending()
        if not self._tables:
            return
        table = pa.concat_tables(self._tables) if len(self._tables) > 1 else self._tables[0]
        self._tables, self._table_rows, self._table_bytes = [], 0, 0
        name = layout.bronze_file("events", len(self.entries))
        conformed = schemas.conform(table, schemas.BRONZE["events"])
        self.entries.append(self.storage.write_table(self.folder, name, conformed, "events"))

    def finish(self) -> list[FileEntry]:
        """Write what is left; the manifest entries of every events file, in file order."""
        self._write_file()
        return list(self.entries)


def write_table(storage: Storage, folder: Path, name: str, table: pa.Table) -> FileEntry:
    """Write one whole-table file (rollouts, attempts) and return its manifest entry."""
    return storage.write_table(
        folder, layout.bronze_file(name), schemas.conform(table, schemas.BRONZE[name]), name
    )
