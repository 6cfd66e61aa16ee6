"""Turning fetched spans into Parquet files while fetching goes on.

Spans are converted to Arrow in small batches as they arrive (cheap slices of
work between store round trips) and written in files of ``rows_per_file`` on a
worker thread, so the event loop keeps the store's queue full instead of
pausing for one big conversion at the end. Files go through the commit
protocol; none is visible until the collection's manifest names it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from warehouse import bronze, schemas
from warehouse.commit import write_parquet_atomic

BATCH_ROWS = 2048

_SPAN_JSON = frozenset(bronze.JSON_SPAN_FIELDS)
# bronze.to_json's exact settings, built once: json.dumps would build an encoder per call,
# and per span there are seven of them.
_encode = json.JSONEncoder(sort_keys=True, default=str, allow_nan=True).encode


def _json(value: Any) -> str | None:
    if value is None:
        return None
    if not value and isinstance(value, list | dict):
        return "[]" if isinstance(value, list) else "{}"  # most events / links: no encoder call
    return _encode(value)


def spans_arrow(spans: list[dict[str, Any]], collection_id: str) -> pa.Table:
    """Exactly ``bronze.spans_table(spans, collection_id)``, built column by column.

    The generic builder costs ~60 us per span; collect converts every span of a store,
    so this one works a column at a time with one reused JSON encoder (~15 us).
    """
    columns = []
    for field in schemas.SPANS:
        name = field.name
        if name == "collection_id":
            values: list[Any] = [collection_id] * len(spans)
        elif name in _SPAN_JSON:
            values = [_json(s.get(name)) for s in spans]
        else:
            values = [s.get(name) for s in spans]
        columns.append(pa.array(values, type=field.type))
    return pa.Table.from_arrays(columns, schema=schemas.SPANS)


class SpanFileWriter:
    """Accumulates span dicts; converts them in batches; writes ``spans-NNNN.parquet`` files."""

    def __init__(self, folder: Path, collection_id: str, rows_per_file: int) -> None:
        self.folder = folder
        self.collection_id = collection_id
        self.rows_per_file = rows_per_file
        self.entries: list[dict[str, Any]] = []
        self.rows = 0
        self._pending: list[dict[str, Any]] = []
        self._tables: list[pa.Table] = []
        self._table_rows = 0
        self._index = 0
        self._writes: list[asyncio.Task[None]] = []

    def _convert_pending(self) -> None:
        if self._pending:
            table = spans_arrow(self._pending, self.collection_id)
            self._pending = []
            self._tables.append(table)
            self._table_rows += table.num_rows

    async def add(self, spans: list[dict[str, Any]]) -> None:
        """Take one attempt's spans; start writing a file once enough rows are waiting."""
        self._pending.extend(spans)
        self.rows += len(spans)
        if self._table_rows + len(self._pending) >= self.rows_per_file:
            self._convert_pending()
            self._start_write()
        elif len(self._pending) >= BATCH_ROWS:
            self._convert_pending()
        await asyncio.sleep(0)

    def _start_write(self) -> None:
        table = pa.concat_tables(self._tables) if len(self._tables) > 1 else self._tables[0]
        self._tables, self._table_rows = [], 0
        path = self.folder / f"spans-{self._index:04d}.parquet"
        self._index += 1
        self._writes.append(asyncio.ensure_future(self._write(path, table)))

    async def _write(self, path: Path, table: pa.Table) -> None:
        entry = await asyncio.to_thread(write_parquet_atomic, path, table)
        self.entries.append({**entry, "table": "spans"})

    async def finish(self) -> list[dict[str, Any]]:
        """Write what is left; wait for every file; return their manifest entries in file order."""
        self._convert_pending()
        if self._tables:
            self._start_write()
        if self._writes:
            await asyncio.gather(*self._writes)
        return sorted(self.entries, key=lambda e: e["path"])

    async def abandon(self) -> None:
        """Wait for writes in flight (so no thread outlives the run); their files stay uncommitted."""
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)


def write_table(folder: Path, name: str, table: pa.Table) -> dict[str, Any]:
    """Write one whole-table file (rollouts, attempts) and return its manifest entry."""
    path = folder / f"{name}-0000.parquet"
    entry = write_parquet_atomic(path, schemas.conform(table, schemas.BRONZE[name]))
    return {**entry, "table": name}
