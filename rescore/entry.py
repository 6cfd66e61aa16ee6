"""``rescore``: new rewards for archived rollouts, offline, as a versioned reward layer.

The scorer runs over every rollout of the chosen collections (no model is called again) in
worker processes; each rollout gets a score, None, or the first line of its failure, and the
scores are committed as ``rewards/NAME/vN`` (the same reserve / write / manifest-last protocol
as a dataset version). A layer is named by what made it: the scorer, the sha256 of its source
file and the collections it read; the same again is "identical" and nothing is run or written.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pyarrow as pa
from tracebank.core.events import OnEvent, RescoreProgress
from tracebank.core.versions import tracebank_version
from tracebank.rescore.config import RescoreConfig
from tracebank.rescore.errors import RescoreError
from tracebank.rescore.inputs import as_plain, collection_rollouts
from tracebank.rescore.judging import Outcome, judge_all, judge_identity, judge_record, load_judge, prompts
from tracebank.rescore.record import ScoredRollout
from tracebank.rescore.rubric import read_rubric
from tracebank.rescore.scorer import load_scorer, source_of
from tracebank.rescore.workers import score_chunk
from tracebank.warehouse import layout, schemas
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import CollectionManifest, RewardLayerManifest
from tracebank.warehouse.storage import Storage, encode_parquet

#: Records a worker scores per task (progress moves a chunk at a time).
CHUNK = 64


@dataclass(frozen=True)
class RescoreResult:
    """The committed (or identical) layer version."""

    folder: Path
    record: RewardLayerManifest
    identical: bool = False

    @property
    def ref(self) -> str:
        return f"{self.record.name}@v{self.record.version}"

    def summary(self) -> str:
        c = self.record.counts
        if self.identical:
            return (
                f"identical to {self.ref} ({'judge' if self.record.judge else 'scorer source'} "
                f"{self.record.source_hash[:8]}, same collections): "
                "nothing run or written (--force scores again)"
            )
        failed = f", {c['failed']:,} failed (first: {next(iter(c['failures']))})" if c["failed"] else ""
        return (
            f"wrote reward layer {self.ref}: {c['scored']:,} of {c['rollouts']:,} rollouts scored, "
            f"{c['unscored']:,} unscored{failed}"
        )


def _chosen(wh: Warehouse, wanted: tuple[str, ...]) -> list[tuple[str, CollectionManifest]]:
    committed = {folder.name: m for folder, m in Storage(wh).collections()}
    missing = [c for c in wanted if c not in committed]
    if not committed or missing:
        what = f"collection {missing[0]!r}" if missing else "collection"
        raise RescoreError(f"no committed {what} in {wh.root}", "collect rollouts first: `tracebank collect`")
    return [(cid, committed[cid]) for cid in (sorted(set(wanted)) if wanted else sorted(committed))]


def _inputs_hash(scorer: str, source_hash: str, chosen: list[tuple[str, CollectionManifest]]) -> str:
    collections = [(cid, m.content_hash or sorted(e.sha256 for e in m.files)) for cid, m in chosen]
    doc = {"scorer": scorer, "source_hash": source_hash, "collections": collections}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _score_all(
    config: RescoreConfig, records: list[ScoredRollout], emit: OnEvent
) -> list[tuple[float | None, str | None]]:
    chunks = [[as_plain(r) for r in records[i : i + CHUNK]] for i in range(0, len(records), CHUNK)]
    results: list[list[tuple[float | None, str | None]]] = [[] for _ in chunks]
    done = scored = failed = 0
    # spawn: a fresh interpreter per worker, whatever threads this process runs
    with ProcessPoolExecutor(config.workers, mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(score_chunk, config.scorer, chunk): n for n, chunk in enumerate(chunks)}
        for future in as_completed(futures):
            part = results[futures[future]] = future.result()
            done += len(part)
            scored += sum(score is not None for score, _ in part)
            failed += sum(error is not None for _, error in part)
            emit(RescoreProgress(done=done, total=len(records), scored=scored, failed=failed))
    return [pair for part in results for pair in part]


def _judge_all(
    config: RescoreConfig, records: list[ScoredRollout], emit: OnEvent
) -> tuple[list[tuple[float | None, str | None]], dict[str, list[Any]]]:
    """(score, error) per record, and the samples columns."""
    rubric, judge = load_judge(config)
    texts = prompts(rubric, records, config.judging.group)
    outcomes: list[Outcome] = [(None, None)] * len(records)
    done = scored = failed = 0
    for n, outcome in judge_all(judge, texts, records, config.workers):
        outcomes[n] = outcome
        done, scored, failed = done + 1, scored + (outcome[0] is not None), failed + (outcome[1] is not None)
        emit(RescoreProgress(done=done, total=len(records), scored=scored, failed=failed))
    judged = [j for j, _ in outcomes]
    extras = {
        "samples": [j.samples if j else None for j in judged],
        "samples_mean": [j.mean if j else None for j in judged],
        "samples_std": [j.std if j else None for j in judged],
    }
    return [(j.score if j else None, e) for j, e in outcomes], extras


def _table(
    records: list[ScoredRollout],
    scores: list[tuple[float | None, str | None]],
    extras: dict[str, list[Any]] | None = None,
) -> pa.Table:
    columns = {
        "collection_id": [r.collection_id for r in records],
        "rollout_id": [r.rollout_id for r in records],
        "attempt_id": [r.attempt_id for r in records],
        "score": [s for s, _ in scores],
        "error": [e for _, e in scores],
        **(extras or {k: [None] * len(records) for k in ("samples", "samples_mean", "samples_std")}),
    }
    return pa.Table.from_pydict(columns, schema=schemas.REWARD_SCORES)


def _counts(scores: list[tuple[float | None, str | None]]) -> dict[str, Any]:
    failures = Counter(error for _, error in scores if error is not None)
    return {
        "rollouts": len(scores),
        "scored": sum(score is not None for score, _ in scores),
        "unscored": sum(score is None and error is None for score, error in scores),
        "failed": sum(failures.values()),
        "failures": dict(failures.most_common(10)),
    }


def rescore(wh: Warehouse, config: RescoreConfig, on_event: OnEvent | None = None) -> RescoreResult:
    """Score the chosen collections' rollouts with ``config.scorer``; commit the next layer version."""
    wh.check_format()
    config.validate()
    emit = on_event or (lambda event: None)
    judge: dict[str, Any] | None = None
    if config.judging.judge:
        judge = judge_record(config.judging, read_rubric(config.judging.rubric or ""))
        scorer, source_file, source_hash = f"judge:{judge['model']}", None, judge_identity(judge)
    else:
        scorer = config.scorer
        source_file, source_hash = source_of(load_scorer(config.scorer))
    chosen = _chosen(wh, config.collections)
    storage = Storage(wh)
    hashed = _inputs_hash(scorer, source_hash, chosen)
    if not config.force:
        for folder, existing in reversed(storage.reward_layers(config.name)):
            if existing.content_hash == hashed:
                return RescoreResult(folder, existing, identical=True)
    records = [r for cid, m in chosen for r in collection_rollouts(wh, cid, m)]
    if not records:
        raise RescoreError(f"the chosen collections hold no rollout to score in {wh.root}")
    extras = None
    if judge is not None:
        scores, extras = _judge_all(config, records, emit)
    else:
        scores = _score_all(config, records, emit)
    table = _table(records, scores, extras)
    version, folder = storage.reserve_reward_layer(config.name)
    try:
        entry = storage.write_buffer(
            folder, layout.REWARD_SCORES_FILE, encode_parquet(table), table.num_rows, "reward_scores"
        )
        manifest = RewardLayerManifest(
            name=config.name,
            version=version,
            scorer=scorer,
            source_hash=source_hash,
            judge=judge,
            content_hash=hashed,
            created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            tracebank_version=tracebank_version(),
            source_file=source_file,
            collections=[cid for cid, _ in chosen],
            counts=_counts(scores),
            files=[entry],
        )
        storage.commit_reward_layer(folder, manifest)
    except BaseException:
        storage.abandon_version(folder)
        raise
    return RescoreResult(folder, manifest)
