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
from tracebank.core.arrowutil import arrow_ints
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
    ids, verdict = _fast_parse(texts, con)
    return resolve_slow(ids, verdict, texts)


def _fast_parse(
    texts: pa.Array | pa.ChunkedArray, con: duckdb.DuckDBPyConnection | None = None
) -> tuple[pa.Array, pa.Array]:
    """The bulk parse alone: (ids, verdict), verdict NULL where only ``resolve_slow`` can tell."""
    texts = _one_array(texts)
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
    return out.column("ids").combine_chunks(), out.column("verdict").combine_chunks()


def _one_array(texts: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(texts, pa.ChunkedArray):
        return texts.combine_chunks() if texts.num_chunks else pa.array([], pa.string())
    return texts


def _large_offsets(texts: pa.Array) -> np.ndarray:
    """The value offsets of a ``large_string`` array's rows (into its data buffer)."""
    return np.frombuffer(texts.buffers()[1], np.int64)[texts.offset : texts.offset + len(texts) + 1]


def parse_prompt_lists(
    texts: pa.Array | pa.ChunkedArray, keys: list[Any], con: duckdb.DuckDBPyConnection | None = None
) -> tuple[pa.Array, pa.Array]:
    """``parse_token_lists`` for prompts, parsing each list only past the earlier one it extends.

    A multi-turn call's prompt is usually the previous call's prompt (same ``key``: its
    rollout and attempt) with the reply and new turns appended, so most of the text is
    parsed again and again. Where a row's text is the previous same-key row's list with
    elements appended (``extended_rows``), only those elements are parsed and the earlier
    row's ids are put in front. That gives exactly the whole parse when both parts parse
    cleanly in bulk, which is checked: a batch where one does not is parsed whole.
    """
    texts = _one_array(texts).cast(pa.large_string())
    prev = extended_rows(texts, keys)
    if not (prev >= 0).any():
        return parse_token_lists(texts, con)
    pieces = appended_lists(texts, prev)
    ids, verdict = _fast_parse(pieces, con)
    ok = pc.fill_null(pc.equal(verdict, "ok"), False).to_numpy(zero_copy_only=False)
    chained = np.flatnonzero(prev >= 0)
    if not (ok[chained].all() and ok[prev[chained]].all()):
        return parse_token_lists(texts, con)  # an odd list in a chain (never seen in real traces)
    ids, verdict = resolve_slow(ids, verdict, pieces)  # only whole lists can be undecided
    return extend_chains(ids, prev), verdict


def extended_rows(texts: pa.Array, keys: list[Any]) -> np.ndarray:
    """For each row, the earlier row (the last one with the same key) whose list its text extends
    with more elements (``[1, 2]`` -> ``[1, 2, 3]``), or -1.

    The earlier text must end in a digit and ``]``, and this one continue its bytes with ``,``:
    so the shared part ends where an element ends (``[1, 2`` is no prefix of ``[1, 23]``), and
    never after a trailing comma (DuckDB reads ``[1, 2,]`` as ``[1, 2]``).
    """
    prev = np.full(len(texts), -1, np.int64)
    if len(texts) == 0 or texts.null_count == len(texts):
        return prev
    offsets = _large_offsets(texts).tolist()
    data = texts.buffers()[2].to_pybytes() if texts.buffers()[2] is not None else b""
    valid = texts.is_valid().to_numpy(zero_copy_only=False)
    last: dict[Any, int] = {}
    for r, key in enumerate(keys):
        if not valid[r]:
            continue
        p = last.get(key)
        last[key] = r
        if p is None:
            continue
        a, n = offsets[p], offsets[p + 1] - offsets[p]
        b = offsets[r]
        if (
            n >= 3
            and offsets[r + 1] - b > n
            and data[a + n - 1] == 0x5D  # ]
            and 0x30 <= data[a + n - 2] <= 0x39  # a digit
            and data[b + n - 1] == 0x2C  # ,
            and data.startswith(data[a : a + n - 1], b)
        ):
            prev[r] = p
    return prev


def appended_lists(texts: pa.Array, prev: np.ndarray) -> pa.Array:
    """Each text, or where ``prev`` is set only the elements it appends, as a list of their
    own: ``[1, 2, 3, 4]`` after ``[1, 2]`` gives ``[ 3, 4]`` (its ``,`` made a ``[``)."""
    n = len(texts)
    offsets = _large_offsets(texts)
    data = np.frombuffer(texts.buffers()[2], np.uint8)
    starts = offsets[:-1].copy()
    ext = prev >= 0
    starts[ext] += offsets[prev[ext] + 1] - offsets[prev[ext]] - 1
    lengths = offsets[1:] - starts
    new = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=new[1:])
    out = np.empty(int(new[-1]), np.uint8)
    for r in range(n):
        out[new[r] : new[r + 1]] = data[starts[r] : offsets[r + 1]]
    out[new[:-1][ext]] = 0x5B  # [
    validity = pa.py_buffer(np.packbits(texts.is_valid().to_numpy(zero_copy_only=False), bitorder="little"))
    return pa.Array.from_buffers(pa.large_string(), n, [validity, pa.py_buffer(new), pa.py_buffer(out)])


def extend_chains(ids: pa.Array, prev: np.ndarray) -> pa.Array:
    """Each list whose ``prev`` is set (an earlier row, usable) gets that row's finished list
    in front of its own elements."""
    chained = prev >= 0
    start = ids.offsets.to_numpy()
    own = np.diff(start) * ids.is_valid().to_numpy(zero_copy_only=False)
    total = own.copy()
    for row in np.flatnonzero(chained):
        total[row] += total[prev[row]]  # the earlier row's total is final by now
    offsets = np.zeros(len(ids) + 1, np.int32)
    np.cumsum(total, out=offsets[1:])
    values = ids.values.to_numpy()
    out = np.empty(int(offsets[-1]), np.int32)
    for r in range(len(ids)):
        at = int(offsets[r])
        if chained[r]:
            p = prev[r]
            out[at : at + total[p]] = out[offsets[p] : offsets[p + 1]]
            at += int(total[p])
        out[at : offsets[r + 1]] = values[start[r] : start[r] + own[r]]
    return pa.ListArray.from_arrays(offsets, out, type=TOKENS, mask=ids.is_null())


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
