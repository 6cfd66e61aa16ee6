"""Small DuckDB tables from Python values, typed in :mod:`columns`' notation, without Arrow.

DuckDB imports pandas (about 0.35 s) the first time it is handed an Arrow table, and pyarrow with
numpy cost 0.1-0.15 s more; `tracebank sql` is a fresh process that needs neither for its helper
tables (catalog rows, file lists, empty tables of a known schema). So they are declared from
their columns and filled column-wise with ``unnest`` over bound lists: one statement, no
per-row round trip (``executemany`` takes about 0.7 ms a row).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tracebank.warehouse.columns import Columns

if TYPE_CHECKING:
    import duckdb

_SCALARS = {
    "string": "VARCHAR",
    "int32": "INTEGER",
    "int64": "BIGINT",
    "float64": "DOUBLE",
    "bool": "BOOLEAN",
}


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def duck_type(notation: str) -> str:
    """The DuckDB type of a column type in :mod:`columns`' notation."""
    if notation.startswith("list<") and notation.endswith(">"):
        return duck_type(notation[5:-1]) + "[]"
    return _SCALARS[notation]


def typed_column(values: Sequence[Any]) -> tuple[str, list[Any]]:
    """The type pyarrow would give a column of these Python values (bool, int64, float64 for
    integers and floats mixed, else string: all None too) and the values to bind for it."""
    kinds = {type(v) for v in values if v is not None}
    if kinds == {bool}:
        return "bool", list(values)
    if kinds == {int}:
        return "int64", list(values)
    if kinds and kinds <= {int, float}:
        return "float64", list(values)
    return "string", [None if v is None else str(v) for v in values]


def create_table(
    con: duckdb.DuckDBPyConnection, name: str, cols: Columns, values: Sequence[Sequence[Any]] = ()
) -> None:
    """Create table ``name`` (already quoted where it needs to be) with ``cols`` and fill it from
    ``values``: one list of Python values per column, all the same length (none: empty table)."""
    types = [duck_type(notation) for _, notation in cols]
    declared = ", ".join(f"{_quoted(col)} {t}" for (col, _), t in zip(cols, types, strict=True))
    con.execute(f"CREATE TABLE {name} ({declared})")
    if not values or not len(values[0]):
        return
    if len(values) != len(types) or len({len(v) for v in values}) != 1:
        raise ValueError(f"table {name}: {len(types)} columns of equal length expected")
    unnested = ", ".join(f"unnest(${i + 1}::{t}[])" for i, t in enumerate(types))
    con.execute(f"INSERT INTO {name} SELECT {unnested}", [list(v) for v in values])
