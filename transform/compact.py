"""Rollout tasks as small integers: ``--per-task`` needs only which rollouts share one.

A rollout's task is its ``input``, which can be a whole prompt; a transform
keeps one per rollout from the first read to the selection, so it is replaced
by a small integer per distinct task as each collection is read.
"""

from __future__ import annotations

import hashlib

import polars as pl
import pyarrow as pa


class TaskCodes:
    """A small integer for each distinct task text, the same across the collections read.

    Keyed by a 128-bit BLAKE2b digest of the text, so the texts themselves are
    not kept (two different tasks would share a code only on a digest collision).
    """

    def __init__(self) -> None:
        self._codes: dict[bytes, int] = {}

    def encode(self, tasks: pa.ChunkedArray | pa.Array) -> pa.Array:
        """The code of each task (null stays null)."""
        out: list[int | None] = []
        for text in tasks.to_pylist():
            if text is None:
                out.append(None)
                continue
            key = hashlib.blake2b(text.encode(), digest_size=16).digest()
            out.append(self._codes.setdefault(key, len(self._codes)))
        # Through polars: pa.array() would import pandas (see warehouse.arrowutil).
        return pl.Series(out, dtype=pl.Int64).to_arrow()
