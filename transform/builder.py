"""`transform`: committed collections to a new, immutable dataset version ``NAME@vN``.

Order of work: silver caches (built by ``collect``; read here) -> rewarded calls
(upstream's adapter + the recipe's reverse walk) -> token rows (optionally
merged per trajectory) -> filters and selection -> Parquet files -> manifest.
The version folder is reserved first and committed last; on any failure it
is removed, and a reader never sees it in between (no manifest yet).

Speed: everything up to the selection moves only small per-call columns; the
token lists are read from the silver cache on a helper thread meanwhile and
copied once, straight into each split's final row order (``transform.rows``,
``transform.writer``). Nothing here imports pandas (see ``transform.arrowutil``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
from tracebank.transform.config import TransformConfig
from tracebank.transform.errors import (
    EmptyDatasetError,
    NoCollectionsError,
    SilverMissingError,
    TransformError,
)
from tracebank.transform.manifest import content_hash, rows_digest, source_hash, stats, summary_line
from tracebank.transform.provenance import identical_version, served_models, with_metadata
from tracebank.transform.rows import CallTokens, build_rows
from tracebank.transform.select import rollout_scores, select_rows
from tracebank.transform.triplets import CallCounts, rewarded_calls
from tracebank.transform.writer import split_table, write_split
from tracebank.warehouse import schemas
from tracebank.warehouse.arrowutil import arrow_ints
from tracebank.warehouse.catalog import DatasetRef
from tracebank.warehouse.layout import Warehouse
from tracebank.warehouse.records import CollectionManifest, DatasetManifest
from tracebank.warehouse.storage import Storage, files_of, read_table

CALL_COLUMNS = [
    "collection_id",
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


@dataclass(frozen=True)
class TransformResult:
    """The committed version: its reference, folder and manifest."""

    ref: DatasetRef
    folder: Path
    record: DatasetManifest
    identical: bool = False
    """Nothing was written: an existing version has this content hash (see ``--force``)."""

    @property
    def manifest(self) -> dict[str, Any]:
        """The manifest as committed (its JSON form)."""
        return self.record.to_json()

    def summary(self) -> str:
        if self.identical:
            return (
                f"identical to {self.ref} (hash {self.record.content_hash[:8]}): nothing written "
                "(--force writes a new version anyway)"
            )
        return summary_line(self.manifest)


def tracebank_version() -> str:
    try:
        return metadata.version("tracebank")
    except metadata.PackageNotFoundError:
        return "unknown"


def choose_collections(wh: Warehouse, wanted: tuple[str, ...]) -> list[tuple[str, CollectionManifest]]:
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


def _bronze(
    wh: Warehouse, cid: str, manifest: CollectionManifest, table: str, columns: list[str]
) -> pa.Table:
    files = files_of(wh.collection_dir(cid), manifest, table)
    schema = schemas.BRONZE[table]
    return read_table(files, columns=columns, schema=pa.schema([schema.field(c) for c in columns]))


Inputs = tuple[pl.DataFrame, Future[CallTokens], pl.DataFrame, pl.DataFrame, pl.DataFrame, dict[str, int]]


def load_inputs(
    wh: Warehouse, chosen: list[tuple[str, CollectionManifest]], pool: ThreadPoolExecutor
) -> Inputs:
    """(calls, their tokens, rewards, attempts, rollouts, silver counts).

    ``calls`` holds the small per-call columns and ``tok``, the call's index in the
    token lists, which stay flat in ``CallTokens`` until rows are materialised.
    Token lists are read from the silver caches on ``pool`` while the rows are
    planned (planning never looks at them).
    """
    calls, rewards, attempts, rollouts = [], [], [], []
    token_parts: list[Callable[[], pa.Table]] = []
    storage = Storage(wh)
    loaded = 0
    for order, (cid, manifest) in enumerate(chosen):
        require_silver(storage, cid)
        c = storage.silver_table(cid, "llm_calls", CALL_COLUMNS)
        r = storage.silver_table(cid, "rewards", REWARD_COLUMNS)
        token_parts.append(partial(storage.silver_table, cid, "llm_calls", TOKEN_COLUMNS))
        c = c.append_column("tok", arrow_ints(np.arange(loaded, loaded + c.num_rows, dtype=np.int64)))
        loaded += c.num_rows
        calls.append(c.append_column("source_order", arrow_ints(np.full(c.num_rows, order, np.int32))))
        rewards.append(r.append_column("source_order", arrow_ints(np.full(r.num_rows, order, np.int32))))
        attempts.append(_bronze(wh, cid, manifest, "attempts", ["rollout_id", "attempt_id", "sequence_id"]))
        rollouts.append(_bronze(wh, cid, manifest, "rollouts", ["rollout_id", "input"]))
    tokens = pool.submit(_load_tokens, token_parts, loaded)
    call_frame = pl.from_arrow(pa.concat_tables(calls, promote_options="permissive"))
    reward_frame = pl.from_arrow(pa.concat_tables(rewards, promote_options="permissive"))
    attempt_frame = pl.from_arrow(pa.concat_tables(attempts))
    rollout_frame = pl.from_arrow(pa.concat_tables(rollouts))
    assert isinstance(call_frame, pl.DataFrame) and isinstance(reward_frame, pl.DataFrame)
    assert isinstance(attempt_frame, pl.DataFrame) and isinstance(rollout_frame, pl.DataFrame)
    return call_frame, tokens, reward_frame, attempt_frame, rollout_frame, {"cached": len(chosen)}


def require_silver(storage: Storage, collection_id: str) -> None:
    """Raise SilverMissingError unless the collection has a current silver cache."""
    if storage.current_silver(collection_id) is None:
        raise SilverMissingError(
            f"the silver tables of collection {collection_id} are missing or stale",
            f"build them with `tracebank collect --rebuild-silver --collection {collection_id}` "
            "(`tracebank transform` builds them itself)",
        )


def _load_tokens(parts: list[Callable[[], pa.Table]], expected: int) -> CallTokens:
    tables = [part() for part in parts]
    if sum(t.num_rows for t in tables) != expected:
        raise TransformError("a silver cache changed while it was read", "run the transform again")
    return CallTokens.from_arrow(
        [t.column("prompt_token_ids") for t in tables], [t.column("response_token_ids") for t in tables]
    )


def transform(wh: Warehouse, config: TransformConfig) -> TransformResult:
    """Build and commit the next version of ``config.name``; see the module docstring."""
    wh.check_format()
    config.validate()
    chosen = choose_collections(wh, config.collections)
    if config.rules == "agl1":
        from tracebank.transform.agl1_build import build_agl1_version

        version, folder, manifest = build_agl1_version(wh, config, chosen)
        return TransformResult(DatasetRef(config.name, version), folder, manifest)
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="transform-io") as pool:
        calls, tokens, rewards, attempts, rollouts, silver_counts = load_inputs(wh, chosen, pool)
        return _build(wh, config, chosen, calls, tokens, rewards, attempts, rollouts, silver_counts)


def _build(
    wh: Warehouse,
    config: TransformConfig,
    chosen: list[tuple[str, CollectionManifest]],
    calls: pl.DataFrame,
    tokens: Future[CallTokens],
    rewards: pl.DataFrame,
    attempts: pl.DataFrame,
    rollouts: pl.DataFrame,
    silver_counts: dict[str, int],
) -> TransformResult:

    call_counts = CallCounts()
    rewarded = rewarded_calls(calls, rewards, attempts, call_counts)
    rewarded = rewarded.sort(["rollout_id", "call_index"])
    rows, source, merge_stats = build_rows(rewarded, tokens.result, merge=config.merge == "trajectory")
    # The recipe's initial order: rollouts in turn, each rollout's calls last to first.
    rows = rows.sort(["rollout_id", "call_index"], descending=[False, True])
    tasks = rollouts.unique("rollout_id", keep="last").select("rollout_id", pl.col("input").alias("task"))
    scores = rollout_scores(rewarded).join(tasks, on="rollout_id", how="left")
    train, validation, select_counts = select_rows(rows, scores, config, source)

    counts: dict[str, Any] = {
        "collections": len(chosen),
        "silver": silver_counts,
        **call_counts.as_dict(),
        "merged": merge_stats,
        **select_counts.as_dict(),
    }
    counts["kept"] = train.height + validation.height
    if train.height == 0:
        raise EmptyDatasetError(
            f"no rows for {config.name}: {call_counts.calls} usable calls, {call_counts.rewarded} rewarded, "
            f"{sum(call_counts.rejected.values())} rejected, {counts['kept']} kept after the filters",
            'check the rewards with `tracebank sql "SELECT * FROM rewards"` or relax the options',
        )

    sources = [{"collection_id": cid, "content_hash": source_hash(m)} for cid, m in chosen]
    tables, digests, max_ids = {}, [], []
    for split, frame in (("train", train), ("validation", validation)):
        if frame.height == 0:
            continue
        tables[split], max_id = split_table(frame, source)
        digests.append({"split": split, "rows": frame.height, "digest": rows_digest(tables[split])})
        max_ids.append(max_id)
    hashed = content_hash(config, sources, digests)
    same = None if config.force else identical_version(wh, config.name, hashed)
    if same is not None:
        folder, existing = same
        return TransformResult(DatasetRef(config.name, existing.version), folder, existing, identical=True)
    storage = Storage(wh)
    version, folder = storage.reserve_version(config.name)
    provenance = {
        "dataset": config.name,
        "version": version,
        "content_hash": hashed,
        "tracebank_version": tracebank_version(),
        "served_models": served_models(config, chosen) or None,
    }
    try:
        files = []
        for split, table in tables.items():
            stamped = with_metadata(table, {**provenance, "split": split})
            files.append(write_split(storage, folder, split, stamped))
        st = stats({"train": train, "validation": validation}, max_ids)
        manifest = DatasetManifest(
            name=config.name,
            version=version,
            created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            tracebank_version=tracebank_version(),
            content_hash=hashed,
            params=config.params(),
            sources=sources,
            counts=counts,
            stats=st,
            rows=st["rows"],
            notes=dict(config.extra) if config.extra else None,
            files=files,
        )
        storage.commit_version(folder, manifest)
    except BaseException:
        storage.abandon_version(folder)
        raise
    return TransformResult(DatasetRef(config.name, version), folder, manifest)
