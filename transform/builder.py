"""`transform`: committed collections to a new, immutable dataset version ``NAME@vN``.

Order of work: silver caches (built by ``collect``; read here) -> rewarded calls
(upstream's adapter + the recipe's reverse walk) -> token rows (optionally
merged per trajectory) -> filters and selection -> Parquet files -> manifest.
The version folder is reserved first and committed last; on any failure it
is removed, and a reader never sees it in between (no manifest yet).

Memory and speed: everything up to the selection moves only small per-call
columns (tens of bytes a call); the token lists are read from the silver cache
a row group at a time on a helper thread meanwhile, into scratch files
(``transform.spill``), and copied once, a piece at a time, straight into each
split's final row order (``transform.rows``, ``transform.writer``). So memory
does not grow with the number of tokens. Nothing here imports pandas (see
``transform.arrowutil``). ``transform.ray_engine`` runs the same plan with the
silver caches and the row writing on a Ray cluster.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
from tracebank.transform.compact import TaskCodes
from tracebank.transform.config import TransformConfig
from tracebank.transform.errors import (
    EmptyDatasetError,
    NoCollectionsError,
    SilverMissingError,
    TransformError,
    TransformUsageError,
)
from tracebank.transform.manifest import content_hash, source_hash, stats, summary_line
from tracebank.transform.provenance import identical_version, served_models
from tracebank.transform.rows import CallTokens, RowTokens, build_rows
from tracebank.transform.select import rollout_scores, select_rows
from tracebank.transform.spill import TokenSpill
from tracebank.transform.triplets import CallCounts, rewarded_calls
from tracebank.transform.writer import OpenSplit, open_split
from tracebank.warehouse import memory, schemas
from tracebank.warehouse.arrowutil import arrow_ints
from tracebank.warehouse.catalog import DatasetRef
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import CollectionManifest, DatasetManifest, FileEntry
from tracebank.warehouse.storage import Storage, files_of, read_table

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


def version_manifest(
    config: TransformConfig,
    version: int,
    content_hash: str,
    sources: list[dict[str, Any]],
    counts: dict[str, Any],
    st: dict[str, Any],
    files: list[FileEntry],
) -> DatasetManifest:
    """The manifest of version ``version`` of ``config.name``, made now by this tracebank."""
    return DatasetManifest(
        name=config.name,
        version=version,
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        tracebank_version=tracebank_version(),
        content_hash=content_hash,
        params=config.params(),
        sources=sources,
        counts=counts,
        stats=st,
        rows=st["rows"],
        notes=dict(config.extra) if config.extra else None,
        files=files,
    )


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


@dataclass
class Inputs:
    """The small per-call columns of the chosen collections, and where their token lists are.

    ``calls`` carries ``tok``, the call's index in load order (collection by
    collection, silver row by silver row); ``token_parts`` read each
    collection's token lists a few hundred rows at a time, in that order.
    """

    calls: pl.DataFrame
    rewards: pl.DataFrame
    attempts: pl.DataFrame
    rollouts: pl.DataFrame
    silver_counts: dict[str, int]
    token_parts: list[Callable[[], Iterator[pa.RecordBatch]]]
    per_collection: list[int]

    @property
    def loaded(self) -> int:
        return sum(self.per_collection)

    def drop_tables(self) -> None:
        """Let the loaded columns go (the caller keeps what it derived from them)."""
        self.calls = self.rewards = self.attempts = self.rollouts = pl.DataFrame()


def load_inputs(wh: Warehouse, chosen: list[tuple[str, CollectionManifest]]) -> Inputs:
    """The chosen collections' small columns, from their silver caches (which collect builds)."""
    calls, rewards, attempts, rollouts = [], [], [], []
    token_parts: list[Callable[[], Iterator[pa.RecordBatch]]] = []
    per_collection: list[int] = []
    storage = Storage(wh)
    tasks = TaskCodes()
    loaded = 0
    for order, (cid, manifest) in enumerate(chosen):
        require_silver(storage, cid)
        c = storage.silver_table(cid, "llm_calls", CALL_COLUMNS)
        r = storage.silver_table(cid, "rewards", REWARD_COLUMNS)
        token_parts.append(partial(storage.silver_batches, cid, "llm_calls", TOKEN_COLUMNS))
        c = c.append_column("tok", arrow_ints(np.arange(loaded, loaded + c.num_rows, dtype=np.int64)))
        loaded += c.num_rows
        per_collection.append(c.num_rows)
        calls.append(c.append_column("source_order", arrow_ints(np.full(c.num_rows, order, np.int32))))
        rewards.append(r.append_column("source_order", arrow_ints(np.full(r.num_rows, order, np.int32))))
        attempts.append(_bronze(wh, cid, manifest, "attempts", ["rollout_id", "attempt_id", "sequence_id"]))
        ro = _bronze(wh, cid, manifest, "rollouts", ["rollout_id", "input"])
        task = tasks.encode(ro.column("input"))  # the input text itself is not kept
        rollouts.append(pa.table({"rollout_id": ro.column("rollout_id"), "task": task}))
    frames = [
        _frame(pa.concat_tables(parts, promote_options="permissive"))
        for parts in (calls, rewards, attempts, rollouts)
    ]
    calls_f, rewards_f, attempts_f, rollouts_f = frames
    counts = {"cached": len(chosen)}
    return Inputs(calls_f, rewards_f, attempts_f, rollouts_f, counts, token_parts, per_collection)


def _frame(table: pa.Table) -> pl.DataFrame:
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


def require_silver(storage: Storage, collection_id: str) -> None:
    """Raise SilverMissingError unless the collection has a current silver cache."""
    if storage.current_silver(collection_id) is None:
        raise SilverMissingError(
            f"the silver tables of collection {collection_id} are missing or stale",
            f"build them with `tracebank collect --rebuild-silver --collection {collection_id}` "
            "(`tracebank transform` builds them itself)",
        )


def spill_tokens(
    parts: list[Callable[[], Iterator[pa.RecordBatch]]], expected: int, spill: TokenSpill
) -> CallTokens:
    """Read every part's token lists into ``spill``; the tokens of all ``expected`` calls."""
    try:
        for part in parts:
            for batch in part():
                spill.append(batch.column("prompt_token_ids"), batch.column("response_token_ids"))
    finally:
        spill.close()
        memory.release()  # Arrow's pool keeps this thread's freed read buffers otherwise
    if spill.calls != expected:
        raise TransformError("a silver cache changed while it was read", "run the transform again")
    return spill.finish()


SplitWriter = Callable[
    [contextlib.ExitStack[Any], Storage, Path, str, pl.DataFrame, RowTokens, dict[str, Any]], OpenSplit
]


def _local_writer(
    stack: contextlib.ExitStack[Any],
    storage: Storage,
    folder: Path,
    split: str,
    frame: pl.DataFrame,
    source: RowTokens,
    provenance: dict[str, Any],
) -> OpenSplit:
    # Looked up at call time, so a test can replace builder.open_split.
    return open_split(stack, storage, folder, split, frame, source, provenance=provenance)


def transform(wh: Warehouse, config: TransformConfig) -> TransformResult:
    """Build and commit the next version of ``config.name``; see the module docstring."""
    wh.check_format()
    config.validate()
    chosen = choose_collections(wh, config.collections)
    if config.rules == "agl1":
        from tracebank.transform.agl1_build import build_agl1_version

        version, folder, manifest = build_agl1_version(wh, config, chosen)
        return TransformResult(DatasetRef(config.name, version), folder, manifest)
    memory.fix_mmap_threshold()
    with (
        tempfile.TemporaryDirectory(prefix="tracebank-transform-") as scratch,
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="transform-io") as pool,
    ):
        inputs = load_inputs(wh, chosen)
        memory.release()
        tokens = pool.submit(spill_tokens, inputs.token_parts, inputs.loaded, TokenSpill(Path(scratch)))
        return build_version(wh, config, chosen, inputs, tokens.result, _local_writer)


def name_collections(rows: pl.DataFrame, chosen: list[tuple[str, CollectionManifest]]) -> pl.DataFrame:
    """``rows`` with ``collection_id`` in place of ``source_order`` (a position in ``chosen``)."""
    ids = pl.Series("collection_id", [cid for cid, _ in chosen], dtype=pl.String)
    named = ids.gather(rows.get_column("source_order"))
    return rows.with_columns(named).drop("source_order")


ENGINES = ("local", "ray")


def run_transform(
    wh: Warehouse, config: TransformConfig, engine: str = "local", address: str | None = None
) -> TransformResult:
    """``transform`` on the chosen engine (``ray``: Ray Data jobs on the cluster at ``address``)."""
    if engine not in ENGINES:
        raise TransformUsageError(f"--engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "local":
        if address is not None:
            raise TransformUsageError("--address only applies to --engine ray")
        return transform(wh, config)
    try:
        from tracebank.transform.ray_engine import transform_ray
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("ray"):
            raise
        raise TransformUsageError(
            "--engine ray needs Ray", "install it with `pip install 'tracebank[ray]'`"
        ) from exc
    return transform_ray(wh, config, address)


def build_version(
    wh: Warehouse,
    config: TransformConfig,
    chosen: list[tuple[str, CollectionManifest]],
    inputs: Inputs,
    tokens: Callable[[], CallTokens],
    write: SplitWriter,
) -> TransformResult:
    """Plan, select and commit the version; ``write`` turns each split's planned rows into files.

    ``tokens`` is only called when rows are materialised on this process
    (``--merge trajectory``, ``--dedup``, or a ``write`` that does it here).
    """
    call_counts = CallCounts()
    rewarded = rewarded_calls(inputs.calls, inputs.rewards, inputs.attempts, call_counts)
    rewarded = rewarded.sort(["rollout_id", "call_index"])
    tasks = inputs.rollouts.unique("rollout_id", keep="last").select("rollout_id", "task")
    inputs.drop_tables()  # what follows needs only the rewarded calls
    rows, source, merge_stats = build_rows(rewarded, tokens, merge=config.merge == "trajectory")
    scores = rollout_scores(rewarded).join(tasks, on="rollout_id", how="left")
    del rewarded, tasks
    # The recipe's initial order: rollouts in turn, each rollout's calls last to first.
    rows = rows.sort(["rollout_id", "call_index"], descending=[False, True])
    train, validation, select_counts = select_rows(rows, scores, config, source)
    del rows, scores
    train, validation = (name_collections(f, chosen) for f in (train, validation))
    memory.release()

    counts: dict[str, Any] = {
        "collections": len(chosen),
        "silver": inputs.silver_counts,
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
    storage = Storage(wh)
    version, folder = storage.reserve_version(config.name)
    # The content hash digests the rows, which stream into the files a piece at a time: the
    # files stay open until it is known, then get it with the rest of their provenance.
    provenance = {
        "dataset": config.name,
        "version": version,
        "tracebank_version": tracebank_version(),
        "served_models": served_models(config, chosen) or None,
    }
    try:
        with contextlib.ExitStack() as stack:
            opened: list[OpenSplit] = []
            digests, max_ids = [], []
            for split, frame in (("train", train), ("validation", validation)):
                if frame.height == 0:
                    continue
                opened.append(write(stack, storage, folder, split, frame, source, provenance))
                digests.append({"split": split, "rows": frame.height, "digest": opened[-1].digest})
                max_ids.append(opened[-1].max_token_id)
            hashed = content_hash(config, sources, digests)
            same = None if config.force else identical_version(wh, config.name, hashed)
            if same is None:
                for split_files in opened:
                    split_files.stamp({"content_hash": hashed})
        if same is not None:
            storage.abandon_version(folder)  # nothing of an identical version is committed
            existing_folder, existing = same
            return TransformResult(
                DatasetRef(config.name, existing.version), existing_folder, existing, identical=True
            )
        files = [entry for split_files in opened for entry in split_files.entries()]
        st = stats({"train": train, "validation": validation}, max_ids)
        manifest = version_manifest(config, version, hashed, sources, counts, st, files)
        storage.commit_version(folder, manifest)
    except BaseException:
        storage.abandon_version(folder)
        raise
    return TransformResult(DatasetRef(config.name, version), folder, manifest)
