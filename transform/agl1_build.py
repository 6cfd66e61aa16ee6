"""The rows of a ``--rules agl1`` dataset version: Agent Lightning 1.0's RolloutAdapter, exactly.

Reads the silver ``llm_calls`` and ``rewards`` of the chosen collections (built by collect) (every
attempt tracebank holds: the spool keeps each rollout's last one, as 1.0 serves
it), applies :mod:`tracebank.transform.agl1_rows` per rollout, and turns each
kept row into a token row: ``input_ids = prompt + response``, ``labels`` the
response tokens 1.0 trains on (its response mask), -100 elsewhere. Rows whose
prompt was over the limit are left out (1.0 masks them out of training) and
counted, like responses cut and rows with nothing to train on.
"""

from __future__ import annotations

import random
from functools import partial
from typing import Any

import polars as pl
import pyarrow as pa
from tracebank.transform.agl1_rows import (
    MISMATCH_REASONS,
    Agl1Limits,
    MergeMismatch,
    calls_by_attempt,
    final_reward,
    rewards_by_attempt,
    rollout_rows,
    token_row,
    triplet_calls,
)
from tracebank.transform.config import TransformConfig
from tracebank.transform.errors import EmptyDatasetError
from tracebank.transform.inputs import Chosen, require_silver
from tracebank.transform.version import Planned, TransformResult, commit_version
from tracebank.transform.writer import whole_split
from tracebank.warehouse import schemas
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.storage import Storage

ROW_FIELDS = [
    pa.field("collection_id", pa.string()),
    pa.field("turn_index", pa.int32()),
    pa.field("response_mask", schemas.TOKENS),
]


def agl1_rows_table(
    silver: list[tuple[str, pa.Table, pa.Table]],
    limits: Agl1Limits,
    seed: int,
    diagnostics: list[dict[str, Any]] | None = None,
) -> tuple[pa.Table, dict[str, Any]]:
    """Token rows of every rollout in ``silver`` ((collection_id, llm_calls, rewards) per collection),
    shuffled with ``seed``, and the counts of what the rules did; with ``trajectory``, the calls
    that could not be merged are appended to ``diagnostics`` (``merge_diagnostics`` rows) when given."""
    rows: list[dict[str, Any]] = []
    counts: dict[str, Any] = {
        "rollouts": 0,
        "calls": 0,
        "trained_calls": 0,
        "rollouts_without_reward": 0,
        "dropped_long_prompt": 0,
    }
    for cid, calls, rewards in silver:
        reward_values = rewards_by_attempt(rewards)
        for (rid, aid), attempt_calls in calls_by_attempt(calls).items():
            values = reward_values.get((rid, aid), [])
            counts["rollouts"] += 1
            counts["calls"] += len(attempt_calls)
            counts["trained_calls"] += len(triplet_calls(attempt_calls))
            counts["rollouts_without_reward"] += final_reward(values) is None
            mismatches: list[MergeMismatch] = []
            for row in rollout_rows(attempt_calls, values, limits, mismatches):
                if row.dropped:
                    counts["dropped_long_prompt"] += 1
                    continue
                tokens = token_row(row)
                rows.append(
                    {
                        **tokens,
                        "rollout_id": rid,
                        "attempt_id": aid,
                        "span_id": f"{rid}/{aid}/turn{row.turn_index}",
                        "collection_id": cid,
                        "turn_index": row.turn_index,
                        "response_mask": row.response_mask,
                    }
                )
            if diagnostics is not None:
                diagnostics += [
                    {"collection_id": cid, "rollout_id": rid, "attempt_id": aid, **vars(m)}
                    for m in mismatches
                ]
    random.Random(seed).shuffle(rows)
    counts["rows"] = len(rows)
    schema = pa.schema(list(schemas.DATASET_ROWS) + ROW_FIELDS)
    table = pa.table(
        {f.name: pa.array([r[f.name] for r in rows], type=f.type) for f in schema}, schema=schema
    )
    return table, counts


def build_agl1(wh: Warehouse, config: TransformConfig, chosen: Chosen) -> TransformResult:
    """Build and commit the next version of ``config.name`` with 1.0's rows, here.

    The rules and limits used are in the manifest's ``params`` (``rules``, ``agl1``)."""
    storage = Storage(wh)
    silver = []
    for cid, _ in chosen:
        require_silver(storage, cid)
        calls, rewards = (storage.silver_table(cid, t) for t in ("llm_calls", "rewards"))
        silver.append((cid, calls, rewards))
    merging = config.agl1.level == "trajectory"
    diagnostics: list[dict[str, Any]] | None = [] if merging else None
    table, counts = agl1_rows_table(silver, config.agl1, config.seed, diagnostics)
    tables = {}
    if diagnostics is not None:
        counts["merge_diagnostics"] = mismatch_counts(diagnostics)
        tables["merge_diagnostics"] = diagnostics_table(diagnostics)
    return commit_agl1(wh, config, chosen, table, counts, tables)


def mismatch_counts(diagnostics: list[dict[str, Any]]) -> dict[str, int]:
    """Calls per reason (every one of 1.0's, zero or not) and ``rollouts`` with one or more
    (1.0's ``training/n_unmerged_rollouts``)."""
    counts = dict.fromkeys(MISMATCH_REASONS, 0)
    for d in diagnostics:
        counts[d["reason"]] = counts.get(d["reason"], 0) + 1
    counts["rollouts"] = len({(d["collection_id"], d["rollout_id"], d["attempt_id"]) for d in diagnostics})
    return counts


def diagnostics_table(diagnostics: list[dict[str, Any]]) -> pa.Table:
    """``merge_diagnostics`` rows as the table's Arrow schema (in rollout, then turn order)."""
    ordered = sorted(
        diagnostics, key=lambda d: (d["collection_id"], d["rollout_id"], d["attempt_id"], d["turn_index"])
    )
    schema = schemas.MERGE_DIAGNOSTICS
    return pa.table(
        {f.name: pa.array([d[f.name] for d in ordered], type=f.type) for f in schema}, schema=schema
    )


def commit_agl1(
    wh: Warehouse,
    config: TransformConfig,
    chosen: Chosen,
    table: pa.Table,
    counts: dict[str, Any],
    tables: dict[str, pa.Table] | None = None,
) -> TransformResult:
    """Commit ``table`` (:func:`agl1_rows_table`'s rows and counts) as the next version of
    ``config.name``: one train file, built whole in memory, so its digest is known before it is written."""
    if table.num_rows == 0:
        raise EmptyDatasetError(
            f"no rows for {config.name}: {counts['calls']} calls in {counts['rollouts']} rollouts, "
            f"{counts['trained_calls']} that 1.0 would train on",
            'check the calls with `tracebank sql "SELECT reject_reason, count(*) FROM llm_calls GROUP BY 1"`',
        )
    ids = table.column("input_ids").to_pylist()
    frame = pl.DataFrame(
        {
            "length": [len(i) for i in ids],
            "trained": [sum(m) for m in table.column("response_mask").to_pylist()],
            "reward": table.column("reward").to_pylist(),
        }
    )
    reported: dict[str, Any] = {
        **counts,
        "collections": len(chosen),
        "unrewarded": counts["rollouts_without_reward"],
        "rejected": {
            "not_trained_by_agl1": counts["calls"] - counts["trained_calls"],
            "long_prompt_rows": counts["dropped_long_prompt"],
        },
        "kept": table.num_rows,
    }
    planned = Planned({"train": frame, "validation": frame.head(0)}, reported, tables or {})
    return commit_version(wh, config, chosen, planned, partial(whole_split, table))
