"""The result of ``Warehouse.sql``: run once, read as rows, Arrow, Polars or pandas."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # duckdb and pyarrow load when a statement first runs
    import pandas as pd
    import polars as pl
    import pyarrow as pa

    from tracebank.warehouse.location import Warehouse
    from tracebank.warehouse.query import ResultRows

Params = Sequence[Any] | Mapping[str, Any] | None


class SqlResult:
    """A read-only statement over the warehouse views (``Warehouse.sql``).

    It runs when first read: ``rows()`` needs no pyarrow (so ``tracebank sql`` starts fast);
    ``arrow()``, ``pl()`` and ``df()`` share one Arrow result.
    """

    def __init__(self, wh: Warehouse, statement: str, params: Params = None) -> None:
        self.statement, self.params = statement, params
        self._wh = wh
        self._rows: ResultRows | None = None
        self._arrow: pa.Table | None = None

    def arrow(self) -> pa.Table:
        """The result as a ``pyarrow.Table``."""
        if self._arrow is None:
            from tracebank.warehouse.query import run_sql

            self._arrow = run_sql(self._wh, self.statement, self.params)
        return self._arrow

    def pl(self) -> pl.DataFrame:
        """The result as a ``polars.DataFrame``."""
        import polars as pl

        frame = pl.from_arrow(self.arrow())
        assert isinstance(frame, pl.DataFrame)
        return frame

    def df(self) -> pd.DataFrame:
        """The result as a ``pandas.DataFrame`` (pandas must be installed)."""
        return self.arrow().to_pandas()

    def result_rows(self) -> ResultRows:
        """Column names and rows as Python values (what ``tracebank sql`` prints)."""
        from tracebank.warehouse.query import ResultRows, sql_rows

        if self._rows is None:
            if self._arrow is not None:
                table = self._arrow
                self._rows = ResultRows(table.column_names, [tuple(r.values()) for r in table.to_pylist()])
            else:
                self._rows = sql_rows(self._wh, self.statement, self.params)
        return self._rows

    @property
    def columns(self) -> list[str]:
        """The result's column names."""
        return self.result_rows().column_names

    def rows(self) -> list[tuple[Any, ...]]:
        """The result's rows as tuples of Python values."""
        return self.result_rows().rows

    def __repr__(self) -> str:
        return f"SqlResult({self.statement!r})"
