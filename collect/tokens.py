"""Token-id lists from the proxy's stringified attributes, parsed column-at-a-time.

The proxy stores token ids as Python list reprs (``"[1, 2, 3]"``), which are
also valid JSON. The whole column goes through DuckDB's JSON reader in one
statement; only strings that do not look like a plain integer list (rare: odd
spacing, a trailing comma, a float, ``True``) are looked at one by one, with
``ast.literal_eval`` exactly as upstream's adapter would, to find out whether
they are still a usable list and, if not, why.

Every list ends up either usable (``list<int32>``, non-empty, ids in
``[0, 2**31)``) or null with a reason.
"""

from __future__ import annotations

import ast
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tracebank.warehouse.arrowutil import arrow_ints
from tracebank.warehouse.schemas import TOKENS

INT32_MAX = 2**31 - 1

MISSING = "missing_tokens"
EMPTY = "empty_tokens"
UNPARSEABLE = "unparseable_tokens"
NON_INTEGER = "non_integer_token"
NEGATIVE = "negative_token_id"
OUT_OF_RANGE = "token_id_out_of_range"

# A string with none of these characters that parses as a JSON list of INTEGER holds
# only integers (from_json would otherwise round "1.5", read "1e3" or "true").
_NOT_INT_CHARS = (".", "e", "E", '"', "t", "f", "n", "N", "I", "{", "_", "x", "+", "/")


def fast_sql(text: str) -> str:
    """SQL for the bulk parse of column ``text``: try(from_json) on plain integer lists, else NULL."""
    clean = " OR ".join(f"contains({text}, '{c}')" for c in _NOT_INT_CHARS)
    return f"CASE WHEN {text} IS NOT NULL AND NOT ({clean}) THEN try(from_json({text}, '[\"INTEGER\"]')) END"


def verdict_sql(text: str, ids: str) -> str:
    """SQL: 'ok', a reject reason, or NULL when only the slow path can tell (see classify_python)."""
    return (
        f"CASE WHEN {text} IS NULL THEN '{MISSING}' "
        f"WHEN {ids} IS NULL OR list_count({ids}) < len({ids}) THEN NULL "
        f"WHEN len({ids}) = 0 THEN '{EMPTY}' "
        f"WHEN list_min({ids}) < 0 THEN '{NEGATIVE}' ELSE 'ok' END"
    )


_FAST_SQL = f"""
SELECT i, verdict, CASE WHEN verdict = 'ok' THEN ids END AS ids
FROM (SELECT i, ids, {verdict_sql("s", "ids")} AS verdict
      FROM (SELECT i, s, {fast_sql("s")} AS ids FROM src))
ORDER BY i
"""


def classify_python(value: Any) -> tuple[list[int] | None, str]:
    """(ids, 'ok') or (None, reason) for one value, as upstream's literal_eval path sees it."""
    if value is None:
        return None, MISSING
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None, UNPARSEABLE
    if not isinstance(value, list):
        return None, UNPARSEABLE
    if not value:
        return None, EMPTY
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        return None, NON_INTEGER
    if min(value) < 0:
        return None, NEGATIVE
    if max(value) > INT32_MAX:
        return None, OUT_OF_RANGE
    return list(value), "ok"


def parse_token_lists(
    texts: pa.Array | pa.ChunkedArray, con: duckdb.DuckDBPyConnection | None = None
) -> tuple[pa.Array, pa.Array]:
    """Parse a string column of token lists; return (list<int32> ids, reason-or-'ok') arrays."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks() if texts.num_chunks else pa.array([], pa.string())
    if len(texts) == 0:
        return pa.nulls(0, TOKENS), pa.nulls(0, pa.string())
    con = con or duckdb.connect()
    src = pa.table(
        {"i": arrow_ints(np.arange(len(texts), dtype=np.int64)), "s": texts.cast(pa.large_string())}
    )
    con.register("src", src)
    try:
        out = con.sql(_FAST_SQL).to_arrow_table()
    finally:
        con.unregister("src")
    return resolve_slow(out.column("ids"), out.column("verdict"), texts)


def resolve_slow(
    ids: pa.Array | pa.ChunkedArray, verdict: pa.Array | pa.ChunkedArray, texts: pa.Array | pa.ChunkedArray
) -> tuple[pa.Array, pa.Array]:
    """Decide the rows the bulk parse left undecided (verdict NULL) one by one."""
    ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    verdict = verdict.combine_chunks() if isinstance(verdict, pa.ChunkedArray) else verdict
    slow = pc.indices_nonzero(pc.is_null(verdict)).to_pylist()
    if not slow:
        return ids.cast(TOKENS), verdict.cast(pa.string())
    # The rare strings that are not plain integer lists: decide them one by one.
    ids_list = ids.to_pylist()
    verdict_list = verdict.to_pylist()
    text_list = texts.take(pa.array(slow, pa.int64())).to_pylist()
    for i, text in zip(slow, text_list, strict=True):
        parsed, reason = classify_python(text)
        ids_list[i] = parsed
        verdict_list[i] = reason
    return pa.array(ids_list, TOKENS), pa.array(verdict_list, pa.string())
