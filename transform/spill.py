"""Token lists of the loaded calls, spilled to two scratch files as they are read.

A transform needs random access to every selected call's tokens (rows are
written in a shuffled order), but only ever a piece of rows at a time. The
silver caches are read one row group at a time and their token values
appended to a prompt file and a response file (raw little-endian int32);
only the offsets (8 bytes per call) stay in memory. Rows are later copied out
of the files with positioned reads (``rows.FileInts``), so the process's
resident memory stays flat however many tokens there are, while the page
cache keeps the files as fast as memory when they fit.
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
        self._ends = [0, 0]
        self.calls = 0

    def append(self, prompts: pa.ChunkedArray | pa.Array, responses: pa.ChunkedArray | pa.Array) -> None:
        """Add the next calls' lists (same length, in load order)."""
        for i, column in enumerate((prompts, responses)):
            values, offsets = flat_pieces([column], self._ends[i])
            for piece in values:
                self._files[i].write(np.ascontiguousarray(piece, "<i4").data)
            self._offsets[i].extend(offsets)
            if offsets:
                self._ends[i] = int(offsets[-1][-1])
        self.calls += len(prompts)

    def finish(self) -> CallTokens:
        """Close the files; the tokens of every appended call."""
        for fh in self._files:
            fh.close()
        po, ro = (np.concatenate(parts) for parts in self._offsets)
        if len(po) != self.calls + 1 or len(ro) != self.calls + 1:
            # flat_pieces skips empty arrays only, so this means a list column held nulls at the top level.
            raise ValueError("token lists and calls are out of step")
        return CallTokens(po, ro, prompt_path=self.prompt_path, response_path=self.response_path)

    def close(self) -> None:
        for fh in self._files:
            fh.close()
