"""The recipe on the local engine (``--engine local``): everything in this process, on every core.

The small per-call columns are loaded first; the token lists are read from the silver caches a
row group at a time meanwhile (a collection per reader thread, up to a reader per core) into
scratch files (``transform.spill``), and copied once, a piece at a time, straight into each split's
final row order (``transform.rows``, ``transform.writer``, which encodes a file per core at once).
So memory does not grow with the number of tokens. Nothing here imports pandas or
pyarrow.compute (see ``warehouse.arrowutil``).
"""

from __future__ import annotations

import contextlib
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import polars as pl
from tracebank.core import memory
from tracebank.core.machine import usable_cores
from tracebank.transform.config import TransformConfig
from tracebank.transform.inputs import Chosen, load_inputs, spill_tokens
from tracebank.transform.recipe import build_recipe
from tracebank.transform.rows import CallTokens, RowTokens
from tracebank.transform.version import TransformResult
from tracebank.transform.writer import OpenSplit, open_split
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.storage import Storage

#: Collections whose token lists are read at once (each reader holds a batch and Arrow's buffers).
MAX_READERS = 4


def build_recipe_locally(wh: Warehouse, config: TransformConfig, chosen: Chosen) -> TransformResult:
    """Build and commit the next version of ``config.name`` with the recipe's rows, here."""
    memory.fix_mmap_threshold()
    with (
        tempfile.TemporaryDirectory(prefix="tracebank-transform-") as scratch,
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="transform-io") as pool,
    ):
        inputs = load_inputs(wh, chosen, config.agent_key)
        memory.release()
        readers = min(usable_cores(), MAX_READERS)
        spilling = pool.submit(spill_tokens, inputs.token_parts, inputs.loaded, Path(scratch), readers)
        return build_recipe(wh, config, chosen, inputs, _SpillDone(spilling), _local_writer)


class _SpillDone:
    """The spilled tokens, once the read is done (what ``RowTokens.tokens`` calls, once a piece).

    The first call (from whichever thread writes first; a second release would be harmless) also
    hands back what the allocators keep from the reader threads (about 100 MB at 1 B tokens,
    which their own releases do not reach) before any row is written.
    """

    def __init__(self, spilling: Future[CallTokens]) -> None:
        self.spilling = spilling
        self.released = False

    def __call__(self) -> CallTokens:
        tokens = self.spilling.result()
        if not self.released:
            self.released = True
            memory.release()
        return tokens


def _local_writer(
    source: RowTokens,
    stack: contextlib.ExitStack[Any],
    storage: Storage,
    folder: Path,
    split: str,
    frame: pl.DataFrame,
    provenance: dict[str, Any],
) -> OpenSplit:
    # Looked up at call time, so a test can replace local_engine.open_split.
    return open_split(stack, storage, folder, split, frame, source, provenance=provenance)
