"""Token rows from rewarded calls (design.md rule 6), optionally merged per trajectory.

A row is ``input_ids = prompt + response``, ``labels = -100 for the prompt,
then the response``, ``attention_mask = 1...``. With ``--merge trajectory``
consecutive calls of a rollout whose prompt starts with the previous call's
prompt + response (a multi-turn conversation) become one row: the input is
the last call's prompt + response and every member call's response is
labelled where it sits in that sequence; everything in between (tool output,
new user turns) stays -100. A call that does not extend the previous one (a
prefix break) or carries another reward starts a new row.

Both cases share one construction: a row is a chain of consecutive calls (of
length 1 without merging). Rows are planned first as small per-row columns
(``first``/``last`` call of the chain, length, reward, provenance); sorting,
filtering and selection move only those. Token lists are copied exactly once,
by :meth:`RowTokens.materialize`, straight into the final order of a split.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
from tracebank.core.arrowutil import arrow_ints, numpy_view
from tracebank.transform.agl1_rows import MISMATCH_REASONS, PREFIX_MISMATCH, first_difference
from tracebank.transform.errors import TransformError
from tracebank.warehouse.contract import IGNORE_INDEX

_MAX_OFFSET = 2**31 - 1

#: What a planned row takes from the call that gives it its tokens (with ``call_index``, as Int32).
ROW_CALL_COLUMNS = ("reward", "rollout_id", "attempt_id", "span_id", "source_order", "response_id")


@dataclass(frozen=True)
class CallTokens:
    """Prompt and response ids of every loaded call, flat; call ``k`` is addressed by its ``tok`` index.

    The values live in memory or, for a warehouse of any size, in two scratch
    files (``transform.spill``) read a row at a time while a piece of rows is
    copied out of them, so the transform's memory does not grow with the token count.
    """

    prompt_offsets: np.ndarray
    response_offsets: np.ndarray
    prompt_values: np.ndarray | None = None
    response_values: np.ndarray | None = None
    prompt_path: Path | tuple[Path, ...] | None = None
    """The scratch file of the prompt values, or several laid end to end (see ``prompt_bases``)."""
    response_path: Path | tuple[Path, ...] | None = None
    prompt_starts: np.ndarray | None = None
    """Where each call's prompt starts, when not at the previous one's end (``transform.spill``
    stores a prompt that extends the one before as what it adds); a prompt always ends at the
    next offset."""
    prompt_bases: tuple[int, ...] = (0,)
    """With several prompt files: the position of each one's first value (no call straddles two)."""
    response_bases: tuple[int, ...] = (0,)

    def prompt_bounds(self, tok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(start, end) of calls ``tok``'s prompts in the prompt values."""
        starts = self.prompt_offsets[tok] if self.prompt_starts is None else self.prompt_starts[tok]
        return starts, self.prompt_offsets[tok + 1]

    @classmethod
    def from_arrow(
        cls, prompts: list[pa.ChunkedArray | pa.Array], responses: list[pa.ChunkedArray | pa.Array]
    ) -> CallTokens:
        """In memory, from each loaded table's list columns, in load order (a null list reads as empty)."""
        pv, po = flat_lists(prompts)
        rv, ro = flat_lists(responses)
        return cls(po, ro, pv, rv)

    @contextmanager
    def values(self) -> Iterator[tuple[Any, Any]]:
        """(prompt values, response values): arrays, or readers of the scratch files whose
        slices read just those values (``values[a:b]`` is all that callers use)."""
        if self.prompt_values is not None and self.response_values is not None:
            yield self.prompt_values, self.response_values
            return
        assert self.prompt_path is not None and self.response_path is not None
        with (
            FileInts(self.prompt_path, self.prompt_bases) as pv,
            FileInts(self.response_path, self.response_bases) as rv,
        ):
            yield pv, rv

    def lists(self, tok: np.ndarray) -> tuple[pa.Array, pa.Array]:
        """(prompt, response) list arrays of calls ``tok`` (only used by the merge check)."""
        out = []
        ro = self.response_offsets
        with self.values() as (pv, rv):
            for values, (lo, hi) in ((pv, self.prompt_bounds(tok)), (rv, (ro[tok], ro[tok + 1]))):
                new_off = np.zeros(len(tok) + 1, np.int64)
                np.cumsum(hi - lo, out=new_off[1:])
                vals = (
                    np.concatenate([values[a:b] for a, b in zip(lo.tolist(), hi.tolist(), strict=True)])
                    if len(tok)
                    else np.zeros(0, np.int32)
                )
                out.append(
                    pa.LargeListArray.from_arrays(
                        arrow_ints(new_off), arrow_ints(vals.astype(np.int32, copy=False))
                    )
                )
        return out[0], out[1]


class FileInts:
    """Files of little-endian int32 values laid end to end (file ``i``'s first value is at
    ``bases[i]``), sliced with ``[a:b]`` by positioned reads; a slice lies within one file.

    Not a memory map: rows are read in a random order, and the pages a map would
    fault in around each one (the kernel's fault-around and read-ahead) count as
    this process's memory, several hundred MB for a piece of rows from a large file.
    """

    def __init__(self, paths: Path | tuple[Path, ...], bases: tuple[int, ...] = (0,)) -> None:
        paths = (paths,) if isinstance(paths, Path) else paths
        if len(paths) != len(bases):
            raise ValueError("a scratch file needs its base")
        self.bases = list(bases)
        self.fds: list[int] = []
        try:
            for path in paths:
                self.fds.append(os.open(path, os.O_RDONLY))
        except BaseException:
            self.__exit__()
            raise

    def __enter__(self) -> FileInts:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []

    def _locate(self, start: int) -> tuple[int, int]:
        """(file descriptor, byte position) of value ``start``."""
        i = bisect.bisect_right(self.bases, start) - 1
        return self.fds[i], 4 * (start - self.bases[i])

    def read_into(self, start: int, out: np.ndarray) -> None:
        """Fill ``out`` (contiguous int32) with the values from ``start`` on, in one read."""
        view = out.data.cast("B")
        fd, at = self._locate(start)
        if os.preadv(fd, [view], at) != view.nbytes:
            _short()

    def __getitem__(self, part: slice) -> np.ndarray:
        start, stop = int(part.start), int(part.stop)
        fd, at = self._locate(start)
        data = os.pread(fd, 4 * (stop - start), at)
        if len(data) != 4 * (stop - start):
            _short()
        return np.frombuffer(data, "<i4")


def _short() -> None:
    raise TransformError("a transform scratch file is shorter than expected", "run the transform again")


def flat_lists(parts: list[pa.ChunkedArray | pa.Array]) -> tuple[np.ndarray, np.ndarray]:
    """(values, offsets) of list arrays laid end to end (a null list reads as empty)."""
    values, offsets = flat_pieces(parts, 0)
    flat = values[0] if len(values) == 1 else (np.concatenate(values) if values else np.zeros(0, np.int32))
    return flat, np.concatenate([np.zeros(1, np.int64), *offsets])


def flat_pieces(
    parts: list[pa.ChunkedArray | pa.Array], base: int
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Value slices and end offsets (from ``base``) of list arrays, without copying the values."""
    values, offsets = [], []
    for part in parts:
        arrays = part.chunks if isinstance(part, pa.ChunkedArray) else [part]
        for arr in arrays:
            if len(arr) == 0:
                continue
            off = numpy_view(arr.offsets).astype(np.int64)
            vals = numpy_view(arr.values)
            values.append(vals[off[0] : off[-1]])
            offsets.append(off[1:] - off[0] + base)
            base += int(off[-1] - off[0])
    return values, offsets


def _chains(
    calls: pl.DataFrame, tokens: Callable[[], CallTokens], merge: bool
) -> tuple[np.ndarray, dict[str, Any] | None, pl.DataFrame | None]:
    """Chain number of each call (calls sorted by rollout, call order), the merge statistics and
    the calls that start a new chain inside their rollout (:func:`_breaks`)."""
    if not merge:
        return np.arange(calls.height, dtype=np.int64), None, None
    prompts, responses = tokens().lists(calls.get_column("tok").to_numpy())
    calls = calls.with_columns(
        pl.Series("prompt_token_ids", prompts), pl.Series("response_token_ids", responses)
    )
    full_len = pl.col("prompt_len") + pl.col("response_len")
    prev = calls.select(
        (pl.col("rollout_id") == pl.col("rollout_id").shift(1)).fill_null(False).alias("same"),
        (pl.col("call_index") == pl.col("call_index").shift(1) + 1).fill_null(False).alias("next"),
        (pl.col("reward") == pl.col("reward").shift(1)).fill_null(False).alias("same_reward"),
        full_len.shift(1).alias("prev_len"),
        pl.concat_list("prompt_token_ids", "response_token_ids").shift(1).alias("prev_full"),
        pl.col("prompt_token_ids"),
        pl.col("prompt_len"),
    )
    extends = prev.select(
        (pl.col("prompt_len") >= pl.col("prev_len")).fill_null(False)
        & (
            pl.col("prompt_token_ids").list.head(pl.col("prev_len").fill_null(0)) == pl.col("prev_full")
        ).fill_null(False)
    ).to_series()
    same = prev.get_column("same") & prev.get_column("next")
    joins = same & extends & prev.get_column("same_reward")
    chain = ((~joins).cast(pl.Int64).cum_sum() - 1).to_numpy()
    stats: dict[str, Any] = {
        "prefix_breaks": int((same & ~extends).sum()),
        "reward_breaks": int((same & extends & ~prev.get_column("same_reward")).sum()),
    }
    breaks = _breaks(calls, prev, (same & ~joins).to_numpy(), extends.to_numpy())
    stats["diagnostics"] = _reason_counts(breaks)
    return chain, stats, breaks


#: A call whose tokens extend the previous call's but whose reward differs (the recipe keeps
#: differently rewarded calls apart; 1.0 has one reward per rollout, so never gives this reason).
REWARD_BREAK = "reward_break"


def _breaks(calls: pl.DataFrame, prev: pl.DataFrame, broken: np.ndarray, extends: np.ndarray) -> pl.DataFrame:
    """One ``merge_diagnostics`` row (ids still coded, ``source_order`` for the collection) per call
    that follows its rollout's previous call but was not merged into its row: a prefix break is
    the mismatch 1.0 calls ``others_mismatch``, with where its prompt first differs."""
    at = np.flatnonzero(broken)
    prefix = ~extends[at]
    contexts = prev.get_column("prev_full").gather(at).to_list()
    prompts = prev.get_column("prompt_token_ids").gather(at).to_list()
    first = [
        first_difference(c, p) if is_prefix else None
        for c, p, is_prefix in zip(contexts, prompts, prefix.tolist(), strict=True)
    ]
    picked = calls[at]
    return picked.select(
        "source_order",
        "rollout_id",
        "attempt_id",
        "span_id",
        pl.col("call_index").cast(pl.Int32).alias("turn_index"),
        pl.Series("reason", np.where(prefix, PREFIX_MISMATCH, REWARD_BREAK), dtype=pl.String),
        pl.Series("first_diff_position", first, dtype=pl.Int64),
        pl.col("prompt_len").cast(pl.Int64).alias("prompt_length"),
        pl.col("response_len").cast(pl.Int64).alias("response_length"),
        prev.get_column("prev_len").gather(at).cast(pl.Int64).alias("previous_trace_length"),
        (pl.col("prompt_len") + pl.col("response_len")).cast(pl.Int64).alias("current_trace_length"),
    )


def _reason_counts(breaks: pl.DataFrame) -> dict[str, int]:
    """Calls per reason (each of 1.0's, zero or not, and reward breaks) and rollouts with one or more."""
    counts = dict.fromkeys((*MISMATCH_REASONS, REWARD_BREAK), 0)
    for reason, n in breaks.get_column("reason").value_counts().iter_rows():
        counts[reason] = n
    counts["rollouts"] = breaks.select(pl.struct("rollout_id", "attempt_id").n_unique()).item()
    return counts


@dataclass(frozen=True)
class RowTokens:
    """What :meth:`materialize` needs of the chained calls: their token indices and lengths.

    ``tokens`` is called when rows are first materialised (it may wait for a read).
    """

    tokens: Callable[[], CallTokens]
    tok: np.ndarray
    prompt_len: np.ndarray
    response_len: np.ndarray

    def materialize(
        self, rows: pl.DataFrame, into: PieceBuffers | None = None
    ) -> tuple[pa.Array, pa.Array, pa.Array, int | None]:
        """(input_ids, attention_mask, labels, max token id) of ``rows``, in their order.

        Each piece (a prompt, a response, a run of -100) is one slice copy; no
        per-token Python work. With ``into`` the ids and labels are written into its
        buffers (the arrays returned are valid until its next use), else into new arrays.
        """
        first = rows.get_column("first").to_numpy()
        last = rows.get_column("last").to_numpy()
        t = self.tokens()
        with t.values() as (pv, rv):
            return self._copy(first, last, t, pv, rv, into or PieceBuffers())

    def _copy(
        self, first: np.ndarray, last: np.ndarray, t: CallTokens, pv: Any, rv: Any, into: PieceBuffers
    ) -> tuple[pa.Array, pa.Array, pa.Array, int | None]:
        # Python lists of just this piece's calls: the loop below indexes them per call.
        sizes = last - first + 1
        starts = np.cumsum(sizes) - sizes
        calls = np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(starts - first, sizes)
        tok = self.tok[calls]
        ro = t.response_offsets
        p_lo, p_hi = (bound.tolist() for bound in t.prompt_bounds(tok))
        r_lo = ro[tok].tolist()
        plen, rlen = self.prompt_len[calls].tolist(), self.response_len[calls].tolist()
        lengths = self.prompt_len[last] + self.response_len[last]
        offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        at = offsets.tolist()

        # Each row's ids are read straight into their place (no per-row arrays, no concatenation).
        input_values, label_values = into.take(at[-1])
        start = 0  # position in ``calls`` of the row's first call
        for row, (a, b) in enumerate(zip(first.tolist(), last.tolist(), strict=True)):
            end = start + b - a  # and of its last
            mid = at[row] + p_hi[end] - p_lo[end]
            _fill(pv, p_lo[end], input_values[at[row] : mid])
            _fill(rv, r_lo[end], input_values[mid : at[row + 1]])
            start = end + 1
        # Labels are the ids with -100 outside the member calls' responses: each member's
        # response sits in the row's ids right after its own prompt (the merge checked that
        # each member's prompt + response starts the next one's prompt).
        np.copyto(label_values, input_values)
        start = 0
        for row, (a, b) in enumerate(zip(first.tolist(), last.tolist(), strict=True)):
            cursor = at[row]
            for j in range(start, start + b - a + 1):
                label_values[cursor : at[row] + plen[j]] = IGNORE_INDEX
                cursor = at[row] + plen[j] + rlen[j]
            start += b - a + 1
        max_id = int(input_values.max()) if len(input_values) else None
        return (
            _list_array(offsets, input_values),
            _list_array(offsets, _ones(len(input_values))),
            _list_array(offsets, label_values),
            max_id,
        )


class PieceBuffers:
    """The ids and labels of one piece of rows after another, in the same two buffers.

    Each new array is fresh pages the kernel must map and zero (a page fault per 4 KiB,
    since ``warehouse.memory`` has large arrays mapped and unmapped on their own): at 1 B
    tokens that was 2 M faults and a quarter of the transform's system time. One owner at a
    time: the arrays :meth:`take` returns are overwritten by its next call.
    """

    def __init__(self) -> None:
        self._ids = np.empty(0, np.int32)
        self._labels = np.empty(0, np.int32)

    def take(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Two int32 arrays of ``n`` values (ids, labels), their contents undefined."""
        if len(self._ids) < n:
            self._ids = self._labels = np.empty(0, np.int32)  # the old ones go before the new come
            self._ids, self._labels = np.empty(n, np.int32), np.empty(n, np.int32)
        return self._ids[:n], self._labels[:n]


def _fill(values: Any, start: int, out: np.ndarray) -> None:
    """Copy ``len(out)`` values from ``start`` on (an array, or a scratch file) into ``out``."""
    if isinstance(values, FileInts):
        values.read_into(start, out)
    else:
        out[:] = values[start : start + len(out)]


_ONES = np.ones(0, np.int32)


def _ones(n: int) -> np.ndarray:
    """``n`` ones, read-only, sliced from one shared array (attention masks are all ones; the
    Arrow arrays built on them only read it, so it is never filled again)."""
    global _ONES
    if len(_ONES) < n:
        ones = np.ones(max(n, 2 * len(_ONES)), np.int32)
        ones.flags.writeable = False
        _ONES = ones
    return _ONES[:n]


def _list_array(offsets: np.ndarray, values: np.ndarray) -> pa.Array:
    if offsets[-1] > _MAX_OFFSET:
        raise TransformError(
            f"a dataset version holds at most {_MAX_OFFSET:,} tokens per split",
            "select fewer rows (--top-fraction, --collection)",
        )
    return pa.ListArray.from_arrays(
        arrow_ints(offsets.astype(np.int32)), arrow_ints(values.astype(np.int32, copy=False))
    )


def build_rows(
    calls: pl.DataFrame, tokens: Callable[[], CallTokens], merge: bool
) -> tuple[pl.DataFrame, RowTokens, dict[str, Any] | None, pl.DataFrame | None]:
    """Plan one row per call (or per merged chain), in rollout then call order.

    ``calls`` are the rewarded calls sorted by (rollout, call_index), with a ``tok``
    column addressing ``tokens`` and a ``source_order`` column (the collection's
    position; rows name their collection only once they are selected, see
    ``builder.name_collections``). Returns the row plan, what materialising it
    needs, the merge statistics and the calls that could not be merged (with merging).
    """
    chain, merge_stats, breaks = _chains(calls, tokens, merge)
    n = calls.height
    # The last call of each chain gives the row its tokens and provenance.
    is_last = np.ones(n, bool)
    if n:
        is_last[:-1] = chain[1:] != chain[:-1]
    last_idx = np.flatnonzero(is_last)
    first_idx = np.concatenate([[0], last_idx[:-1] + 1]) if n else np.zeros(0, np.int64)
    members = last_idx - first_idx + 1

    plen = calls.get_column("prompt_len").to_numpy().astype(np.int64)
    rlen = calls.get_column("response_len").to_numpy().astype(np.int64)
    lengths = plen[last_idx] + rlen[last_idx]
    # Member responses never overlap (each call's prompt + response is a prefix of the
    # next one's prompt) and ids are never -100, so the trained tokens are their sum.
    trained = np.add.reduceat(rlen, first_idx) if n else np.zeros(0, np.int64)

    last = calls.select(*ROW_CALL_COLUMNS, pl.col("call_index").cast(pl.Int32))[last_idx]
    rows = last.with_columns(
        pl.Series("calls", members, dtype=pl.Int32),
        pl.Series("length", lengths, dtype=pl.Int64),
        pl.Series("trained", trained, dtype=pl.Int64),
        pl.Series("first", first_idx, dtype=pl.Int64),
        pl.Series("last", last_idx, dtype=pl.Int64),
    )
    source = RowTokens(tokens, calls.get_column("tok").to_numpy(), plen, rlen)
    if merge_stats is not None:
        merge_stats.update(
            {
                "calls": calls.height,
                "rows": rows.height,
                "tokens_unmerged": int((plen + rlen).sum()),
                "tokens_merged": int(lengths.sum()),
            }
        )
        merge_stats["tokens_saved"] = merge_stats["tokens_unmerged"] - merge_stats["tokens_merged"]
    return rows, source, merge_stats, breaks
