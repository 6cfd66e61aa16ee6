"""Token lists of the loaded calls, spilled to two scratch files as they are read.

A transform needs random access to every selected call's tokens (rows are
written in a shuffled order), but only ever a piece of rows at a time. The
silver caches are read one row group at a time and their token values
appended to a prompt file and a response file (raw little-endian int32);
only the offsets (16 bytes per call) stay in memory. Rows are later copied out
of the files with positioned reads (``rows.FileInts``), so the process's
resident memory stays flat however many tokens there are, while the page
cache keeps the files as fast as memory when they fit.

A multi-turn call's prompt usually starts with the previous call's whole prompt
(the conversation so far). Such a prompt is stored as only what it adds, right
after the previous one, so it still reads as one contiguous range of the file
(from where the first prompt of the conversation starts): the prompt file holds
each conversation about once instead of once per call (a quarter of the bytes
for the long trajectories of ``bench.scale_data``), and writing it into the page
cache was the part of a warm transform that grew faster than the warehouse.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
from tracebank.transform.rows import CallTokens, flat_pieces


class TokenSpill:
    """Appends token lists to the scratch files in ``folder``; :meth:`finish` gives their ``CallTokens``."""

    def __init__(self, folder: Path) -> None:
        self.prompt_path = folder / "prompt.i32"
        self.response_path = folder / "response.i32"
        # Open for the object's life (closed by finish/close), not one with-block.
        self._files: list[BinaryIO] = [open(p, "wb") for p in (self.prompt_path, self.response_path)]  # noqa: SIM115
        self._offsets: list[list[np.ndarray]] = [[np.zeros(1, np.int64)], [np.zeros(1, np.int64)]]
        self._starts: list[np.ndarray] = []  # where each prompt starts (its end: the next offset)
        self._ends = [0, 0]
        self._last: bytes | memoryview = b""  # the last prompt appended
        self._last_start = 0
        self.calls = 0

    def append(self, prompts: pa.ChunkedArray | pa.Array, responses: pa.ChunkedArray | pa.Array) -> None:
        """Add the next calls' lists (same length, in load order)."""
        for arr in prompts.chunks if isinstance(prompts, pa.ChunkedArray) else [prompts]:
            if len(arr):
                self._append_prompts(arr)
        values, offsets = flat_pieces([responses], self._ends[1])
        for piece in values:
            self._files[1].write(np.ascontiguousarray(piece, "<i4").data)
        self._offsets[1].extend(offsets)
        if offsets:
            self._ends[1] = int(offsets[-1][-1])
        self.calls += len(prompts)

    def _append_prompts(self, arr: pa.Array) -> None:
        """Write the prompts of ``arr``, each one that extends the one before as what it adds."""
        values, offsets = flat_pieces([arr], 0)
        data = np.ascontiguousarray(values[0], "<i4").tobytes() if values else b""
        view = memoryview(data)
        bounds = [0, *(4 * offsets[0]).tolist()] if offsets else [0]
        starts = np.empty(len(bounds) - 1, np.int64)
        ends = np.empty(len(bounds) - 1, np.int64)
        written: list[memoryview] = []
        end, last, last_start = self._ends[0], self._last, self._last_start
        for i in range(len(bounds) - 1):
            a, b = bounds[i], bounds[i + 1]
            # startswith compares in place (one memcmp); an empty previous prompt shares nothing.
            shared = len(last) if len(last) and data.startswith(last, a, b) else 0
            starts[i] = last_start if shared else end
            written.append(view[a + shared : b])
            end += (b - a - shared) // 4
            ends[i] = end
            last, last_start = view[a:b], int(starts[i])
        self._files[0].write(b"".join(written))
        self._starts.append(starts)
        self._offsets[0].append(ends)
        self._ends[0], self._last, self._last_start = end, bytes(last), last_start

    def finish(self) -> CallTokens:
        """Close the files; the tokens of every appended call."""
        for fh in self._files:
            fh.close()
        po, ro = (np.concatenate(parts) for parts in self._offsets)
        starts = np.concatenate(self._starts) if self._starts else np.zeros(0, np.int64)
        if len(po) != self.calls + 1 or len(ro) != self.calls + 1:
            # flat_pieces skips empty arrays only, so this means a list column held nulls at the top level.
            raise ValueError("token lists and calls are out of step")
        return CallTokens(
            po, ro, prompt_path=self.prompt_path, response_path=self.response_path, prompt_starts=starts
        )

    def close(self) -> None:
        for fh in self._files:
            fh.close()
