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
        self._last = b""  # the last prompt appended
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
        # A view of Arrow's buffer where it can be (no copy of the batch: each copy of a few MB
        # is fresh pages to fault in); the previous prompt is compared as bytes, one call's worth.
        vals = np.ascontiguousarray(values[0], "<i4") if values else np.zeros(0, "<i4")
        ends_in = offsets[0].tolist() if offsets else []
        starts = np.empty(len(ends_in), np.int64)
        ends = np.empty(len(ends_in), np.int64)
        written: list[memoryview] = []  # views of the values (no copy)
        end, last, last_start = self._ends[0], self._last, self._last_start
        a = 0
        for i, b in enumerate(ends_in):
            n = len(last) // 4
            shared = n if n and b - a >= n and vals[a : a + n].tobytes() == last else 0
            starts[i] = last_start if shared else end
            written.append(vals[a + shared : b].data)
            end += b - a - shared
            ends[i] = end
            last, last_start, a = vals[a:b].tobytes(), int(starts[i]), b
        self._files[0].writelines(written)
        self._starts.append(starts)
        self._offsets[0].append(ends)
        self._ends[0], self._last, self._last_start = end, last, last_start

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


def concat_spills(parts: list[CallTokens]) -> CallTokens:
    """The tokens of several spills' calls, one spill's after another's (each spill's files keep
    their own values; positions run on across them)."""
    if len(parts) == 1:
        return parts[0]
    prompt_base, response_base = 0, 0
    po, ro, starts = [np.zeros(1, np.int64)], [np.zeros(1, np.int64)], []
    prompt_bases, response_bases = [], []
    for t in parts:
        assert (
            t.prompt_starts is not None
            and isinstance(t.prompt_path, Path)
            and isinstance(t.response_path, Path)
        )
        prompt_bases.append(prompt_base)
        response_bases.append(response_base)
        po.append(t.prompt_offsets[1:] + prompt_base)
        ro.append(t.response_offsets[1:] + response_base)
        starts.append(t.prompt_starts + prompt_base)
        prompt_base += int(t.prompt_offsets[-1])
        response_base += int(t.response_offsets[-1])
    return CallTokens(
        np.concatenate(po),
        np.concatenate(ro),
        prompt_path=tuple(t.prompt_path for t in parts),  # type: ignore[misc]
        response_path=tuple(t.response_path for t in parts),  # type: ignore[misc]
        prompt_starts=np.concatenate(starts),
        prompt_bases=tuple(prompt_bases),
        response_bases=tuple(response_bases),
    )
