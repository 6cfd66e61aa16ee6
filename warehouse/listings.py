"""Listings of the catalog as SQL over the warehouse views (what `datasets list` prints)."""

from __future__ import annotations

from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.query import ResultRows, sql_rows

#: Every committed dataset version (of ``$name`` only, when given), by name then version.
DATASETS_SQL = """
SELECT name, 'v' || CAST(version AS VARCHAR) AS version, CAST(rows AS BIGINT) AS rows,
       CAST(json_extract(record, '$.stats.tokens') AS BIGINT) AS tokens,
       created_at, content_hash
FROM datasets
WHERE $name IS NULL OR name = $name
ORDER BY name, CAST(version AS BIGINT)
"""


def datasets_table(wh: Warehouse, name: str | None = None) -> ResultRows:
    """name, version (``vN``), rows, tokens, created_at (ISO), content_hash (whole) of each version."""
    return sql_rows(wh, DATASETS_SQL, {"name": name})
