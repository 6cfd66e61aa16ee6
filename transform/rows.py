"""Token rows from rewarded calls (design.md rule 6), optionally merged per trajectory.

A row is ``input_ids = prompt + response``, ``labels = -100 for the prompt,
then the response``, ``attention_mask = 1...``. With ``--merge trajectory``
consecutive calls of a rollout whose prompt starts with the previous call's
prompt + response (a multi-turn conversation) become one row: the input is
the last call's prompt + response and every member call's response is
labelled where it sits in that sequence; everything in between (tool output,
new user turns) stays -100. A call that does not extend the previous one (a
prefix break) or carries another reward starts a new row.

Both cases share one construction: a row is a chain of calls (of length 1
without merging), labels are written with one vectorised scatter.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from transform.errors import TransformError

_MAX_OFFSET = 2**31 - 1


def _chains(calls: pl.DataFrame, merge: bool) -> tuple[pl.Series, dict[str, Any] | None]:
    """Chain number of each call (calls sorted by rollout, call order)."""
    if not merge:
        return pl.Series("chain", np.arange(calls.height, dtype=np.int64)), None
    full_len = pl.col("prompt_len") + pl.col("response_len")
    prev = calls.select(
        (pl.col("rollout_id") == pl.col("rollout_id").shift(1)).fill_null(False).alias("same"),
        (pl.col("call_index") == pl.col("call_index").shift(1) + 1).fill_null(False).alias("next"),
        (pl.col("reward") == pl.col("reward").shift(1)).fill_null(False).alias("same_reward"),
        full_len.shift(1).alias("prev_len"),
        pl.concat_list("prompt_token_ids", "response_token_ids").shift(1).alias("prev_full"),
        pl.col("prompt_token_ids"), pl.col("prompt_len"),
    )
    extends = prev.select(
        (pl.col("prompt_len") >= pl.col("prev_len")).fill_null(False)
        & (pl.col("prompt_token_ids").list.head(pl.col("prev_len").fill_null(0)) == pl.col("prev_full"))
        .fill_null(False)
    ).to_series()
    same = prev.get_column("same") & prev.get_column("next")
    joins = same & extends & prev.get_column("same_reward")
    chain = (~joins).cast(pl.Int64).cum_sum() - 1
    stats = {
        "prefix_breaks": int((same & ~extends).sum()),
        "reward_breaks": int((same & extends & ~prev.get_column("same_reward")).sum()),
    }
    return chain.alias("chain"), stats


def _list_array(offsets: np.ndarray, values: np.ndarray) -> pa.Array:
    if offsets[-1] > _MAX_OFFSET:
        raise TransformError(f"a dataset version holds at most {_MAX_OFFSET:,} tokens per split",
                             "select fewer rows (--top-fraction, --collection)")
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values, pa.int32()))


def _flat(column: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """(values, offsets) of a list column, without copying the values through Python."""
    arr = column.rechunk().to_arrow()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    offsets = arr.offsets.to_numpy().astype(np.int64)
    values = arr.values.to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
    return values, offsets


def build_rows(calls: pl.DataFrame, merge: bool) -> tuple[pl.DataFrame, dict[str, Any] | None]:
    """One row per call (or per merged chain), in rollout then call order."""
    chain_series, merge_stats = _chains(calls, merge)
    chain = chain_series.to_numpy()
    n = calls.height
    # The last call of each chain gives the row its tokens and provenance.
    is_last = np.ones(n, bool)
    if n:
        is_last[:-1] = chain[1:] != chain[:-1]
    last_idx = np.flatnonzero(is_last)
    last = calls[last_idx]
    members = np.diff(np.concatenate([[-1], last_idx]))

    plen = calls.get_column("prompt_len").to_numpy().astype(np.int64)
    rlen = calls.get_column("response_len").to_numpy().astype(np.int64)
    pvals, poff = _flat(calls.get_column("prompt_token_ids"))
    rvals, roff = _flat(calls.get_column("response_token_ids"))
    # Row = prompt + response of its last call. Slicing per call (not per token) keeps
    # this a handful of memcpy-like steps.
    po, ro = poff.tolist(), roff.tolist()
    pieces = []
    for k in last_idx.tolist():
        pieces.append(pvals[po[k]:po[k + 1]])
        pieces.append(rvals[ro[k]:ro[k + 1]])
    values = np.concatenate(pieces) if pieces else np.zeros(0, np.int32)
    lengths = plen[last_idx] + rlen[last_idx]
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    row_of_call = np.searchsorted(last_idx, np.arange(n))

    # Labels: -100 everywhere, then each member call's response where it sits in its row.
    labels = np.full(len(values), -100, np.int32)
    starts = (offsets[row_of_call] + plen).tolist()
    for k, start in enumerate(starts):
        labels[start:start + ro[k + 1] - ro[k]] = rvals[ro[k]:ro[k + 1]]

    trained = (np.add.reduceat((labels != -100).astype(np.int64), offsets[:-1]) if len(values)
               else np.zeros(len(lengths), np.int64))
    table = pa.table({
        "input_ids": _list_array(offsets, values),
        "attention_mask": _list_array(offsets, np.ones(len(values), np.int32)),
        "labels": _list_array(offsets, labels),
    })
    rows = pl.from_arrow(table)
    assert isinstance(rows, pl.DataFrame)
    rows = rows.with_columns(
        last.get_column("reward"),
        last.get_column("rollout_id"),
        last.get_column("attempt_id"),
        last.get_column("span_id"),
        last.get_column("collection_id"),
        last.get_column("response_id"),
        pl.Series("calls", members, dtype=pl.Int32),
        last.get_column("call_index").cast(pl.Int32),
        pl.Series("length", lengths, dtype=pl.Int64),
        pl.Series("trained", trained, dtype=pl.Int64),
    )
    if merge_stats is not None:
        merge_stats.update({
            "calls": calls.height, "rows": rows.height,
            "tokens_unmerged": int((calls.get_column("prompt_len") + calls.get_column("response_len")).sum()),
            "tokens_merged": int(lengths.sum()),
        })
        merge_stats["tokens_saved"] = merge_stats["tokens_unmerged"] - merge_stats["tokens_merged"]
    return rows, merge_stats
