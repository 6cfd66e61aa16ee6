"""What a transform reads: the chosen committed collections and their silver caches (built by collect).

Every engine and rule set starts here. The recipe loads only the small per-call columns
(:func:`load_inputs`); the token lists are read a few hundred rows at a time into scratch
files (:func:`spill_tokens`, ``transform.spill``), so memory does not grow with the tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
from tracebank.core import memory
from tracebank.core.arrowutil import arrow_ints
from tracebank.transform.agent_key import agent_key as agent_key_of
from tracebank.transform.compact import TaskCodes
from tracebank.transform.config import TAG
from tracebank.transform.errors import NoCollectionsError, SilverMissingError, TransformError
from tracebank.transform.ids import IdNames
from tracebank.transform.rows import CallTokens
from tracebank.transform.spill import TokenSpill, concat_spills
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import CollectionManifest
from tracebank.warehouse.storage import Storage

#: (collection_id, manifest) of each chosen collection, oldest first.
Chosen = list[tuple[str, CollectionManifest]]

# No collection_id: each call carries its collection's position (``source_order``) until
# the selected rows are named (``name_collections``); the string would cost ~50 bytes a call.
CALL_COLUMNS = [
    "rollout_id",
    "attempt_id",
    "span_id",
    "sequence_id",
    "start_time",
    "response_id",
    "prompt_len",
    "response_len",
    "reject_reason",
    "span_index",
    "agent",
]
TOKEN_COLUMNS = ["prompt_token_ids", "response_token_ids"]
REWARD_COLUMNS = [
    "rollout_id",
    "attempt_id",
    "span_id",
    "sequence_id",
    "start_time",
    "value",
    "reject_reason",
    "span_index",
]


def choose_collections(wh: Warehouse, wanted: tuple[str, ...]) -> Chosen:
    """(collection_id, manifest) of the chosen committed collections, oldest first."""
    committed = {folder.name: manifest for folder, manifest in Storage(wh).collections()}
    if not committed:
        raise NoCollectionsError(
            f"no committed collection in {wh.root}", "run `tracebank collect --store URL` first"
        )
    missing = [c for c in wanted if c not in committed]
    if missing:
        known = ", ".join(sorted(committed))
        raise NoCollectionsError(
            f"no committed collection {missing[0]!r} in {wh.root}", f"known collections: {known}"
        )
    ids = sorted(set(wanted)) if wanted else sorted(committed)
    return [(cid, committed[cid]) for cid in ids]


@dataclass
class Inputs:
    """The small per-call columns of the chosen collections, and where their token lists are.

    ``calls`` carries ``tok``, the call's index in load order (collection by
    collection, silver row by silver row); ``token_parts`` read each
    collection's token lists a few hundred rows at a time, in that order. The
    frames' ids are codes (``transform.ids``): ``names`` turns them back.
    """

    calls: pl.DataFrame
    rewards: pl.DataFrame
    attempts: pl.DataFrame
    rollouts: pl.DataFrame
    silver_counts: dict[str, int]
    token_parts: list[Callable[[], Iterator[pa.RecordBatch]]]
    per_collection: list[int]
    names: IdNames

    @property
    def loaded(self) -> int:
        return sum(self.per_collection)

    def drop_tables(self) -> None:
        """Let the loaded columns and names go (the caller keeps what it derived from them)."""
        self.calls = self.rewards = self.attempts = self.rollouts = pl.DataFrame()
        self.names = IdNames()


def load_inputs(wh: Warehouse, chosen: Chosen, agent_key: str = TAG) -> Inputs:
    """The chosen collections' small columns, from their silver caches (which collect builds);
    ``agent_key`` names the 1.0 calls' agents (``transform.agent_key``; tag: silver's as it is)."""
    agents = agent_key_of(agent_key)  # first: a bad MODULE:FUNCTION fails before anything is read
    calls, rewards, attempts, rollouts = [], [], [], []
    token_parts: list[Callable[[], Iterator[pa.RecordBatch]]] = []
    per_collection: list[int] = []
    storage = Storage(wh)
    tasks = TaskCodes()
    loaded = 0
    for order, (cid, manifest) in enumerate(chosen):
        require_silver(storage, cid)
        c = agents.named(storage, cid, storage.silver_table(cid, "llm_calls", CALL_COLUMNS))
        r = storage.silver_table(cid, "rewards", REWARD_COLUMNS)
        token_parts.append(partial(storage.silver_batches, cid, "llm_calls", TOKEN_COLUMNS))
        c = c.append_column("tok", arrow_ints(np.arange(loaded, loaded + c.num_rows, dtype=np.int64)))
        loaded += c.num_rows
        per_collection.append(c.num_rows)
        calls.append(c.append_column("source_order", arrow_ints(np.full(c.num_rows, order, np.int32))))
        rewards.append(r.append_column("source_order", arrow_ints(np.full(r.num_rows, order, np.int32))))
        attempts.append(
            storage.bronze_table(cid, manifest, "attempts", ["rollout_id", "attempt_id", "sequence_id"])
        )
        ro = storage.bronze_table(cid, manifest, "rollouts", ["rollout_id", "input"])
        task = tasks.encode(ro.column("input"))  # the input text itself is not kept
        rollouts.append(pa.table({"rollout_id": ro.column("rollout_id"), "task": task}))
    frames = [
        _frame(pa.concat_tables(parts, promote_options="permissive"))
        for parts in (calls, rewards, attempts, rollouts)
    ]
    del calls, rewards, attempts, rollouts
    names, frames = IdNames.encode(frames)
    calls_f, rewards_f, attempts_f, rollouts_f = frames
    counts = {"cached": len(chosen)}
    return Inputs(calls_f, rewards_f, attempts_f, rollouts_f, counts, token_parts, per_collection, names)


def _frame(table: pa.Table) -> pl.DataFrame:
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


def require_silver(storage: Storage, collection_id: str) -> None:
    """Raise SilverMissingError unless the collection has a current silver cache."""
    if storage.current_silver(collection_id) is None:
        raise SilverMissingError(
            f"the silver tables of collection {collection_id} are missing or stale",
            f"build them with `tracebank rebuild-silver --collection {collection_id}` "
            "(`tracebank transform` builds them itself)",
        )


def spill_tokens(
    parts: list[Callable[[], Iterator[pa.RecordBatch]]], expected: int, folder: Path, threads: int = 1
) -> CallTokens:
    """Read every part's token lists into scratch files under ``folder`` (a pair per part, parts
    read ``threads`` at a time: decoding Parquet lists is most of a warm transform's reading);
    the tokens of all ``expected`` calls, in part order."""

    def one(k: int) -> CallTokens:
        (folder / str(k)).mkdir()
        return _spill_part(parts[k], TokenSpill(folder / str(k)))

    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(parts))), thread_name_prefix="spill") as pool:
        spilled = list(pool.map(one, range(len(parts))))
    memory.release()  # Arrow's pool keeps the threads' freed read buffers otherwise
    if sum(len(t.prompt_offsets) - 1 for t in spilled) != expected:
        raise TransformError("a silver cache changed while it was read", "run the transform again")
    return concat_spills(spilled) if spilled else TokenSpill(_empty(folder)).finish()


def _spill_part(part: Callable[[], Iterator[pa.RecordBatch]], spill: TokenSpill) -> CallTokens:
    try:
        for batch in part():
            spill.append(batch.column("prompt_token_ids"), batch.column("response_token_ids"))
    finally:
        spill.close()
    memory.release()  # this reader thread's freed buffers (a release on another thread misses them)
    return spill.finish()


def _empty(folder: Path) -> Path:
    (folder / "empty").mkdir()
    return folder / "empty"
