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

    It runs when first read: ``rows()`` needs no pyarrow (so ``tracebank sql`` starts fast) and is
    DuckDB's own conversion to Python values; ``arrow()``, ``pl()`` and ``df()`` share one Arrow
    result (a second run of the statement when ``rows()`` was read too).
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
        """The result as a ``polars.DataFrame`` (its columns need distinct names)."""
        import polars as pl

        table = self.arrow()
        _refuse_repeated_names(table.column_names, "polars")
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        return frame

    def df(self) -> pd.DataFrame:
        """The result as a ``pandas.DataFrame`` (pandas must be installed)."""
        return self.arrow().to_pandas()

    def result_rows(self) -> ResultRows:
        """Column names and rows as Python values (what ``tracebank sql`` prints)."""
        from tracebank.warehouse.query import sql_rows

        # Always DuckDB's own conversion, never derived from ``arrow()``: Arrow's to_pylist folds
        # columns of the same name together and turns a MAP, INTERVAL or HUGEINT into other values.
        if self._rows is None:
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


def _refuse_repeated_names(names: list[str], reader: str) -> None:
    """One line naming the repeated column (polars refuses it with a traceback of its own)."""
    from tracebank.core.errors import QueryError

    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise QueryError(
            f"{reader} needs distinct column names; the result repeats {', '.join(map(repr, repeated))}",
            "name the columns with AS, or read the result with .rows() or .arrow()",
        )
