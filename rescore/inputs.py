"""The archived rollouts a scorer is given, read from the warehouse (bronze rollouts and attempts,
silver messages and rewards): one ScoredRollout record per rollout's latest attempt."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import polars as pl
from tracebank.rescore.errors import RescoreError
from tracebank.rescore.record import ScoredRollout
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import CollectionManifest
from tracebank.warehouse.storage import Storage

MESSAGE_COLUMNS = ["rollout_id", "attempt_id", "sequence_id", "direction", "message_index", "role", "content"]
MESSAGE_COLUMNS += ["tool_calls", "tool_call_id"]


def _frame(table: Any) -> pl.DataFrame:
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


def _message(row: dict[str, Any]) -> dict[str, Any]:
    out = {"role": row["role"], "content": row["content"]}
    if row["tool_calls"]:
        out["tool_calls"] = json.loads(row["tool_calls"])
    if row["tool_call_id"]:
        out["tool_call_id"] = row["tool_call_id"]
    return out


def _last_call_messages(messages: pl.DataFrame) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(rollout, attempt) -> the request and response messages of its last call."""
    last = messages.group_by("rollout_id", "attempt_id").agg(pl.col("sequence_id").max())
    rows = (
        messages.join(last, on=["rollout_id", "attempt_id", "sequence_id"], how="semi")
        .with_columns((pl.col("direction") == "output").alias("_out"))
        .sort(["rollout_id", "attempt_id", "_out", "message_index"])
    )
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows.iter_rows(named=True):
        out.setdefault((row["rollout_id"], row["attempt_id"]), []).append(_message(row))
    return out


def collection_rollouts(wh: Warehouse, cid: str, manifest: CollectionManifest) -> list[ScoredRollout]:
    """Every rollout of collection ``cid`` (its latest attempt), as a scorer sees it."""
    storage = Storage(wh)
    if storage.current_silver(cid) is None:
        raise RescoreError(
            f"the silver tables of collection {cid} are missing or stale",
            f"build them with `tracebank rebuild-silver --collection {cid}`",
        )
    attempts = _frame(
        storage.bronze_table(cid, manifest, "attempts", ["rollout_id", "attempt_id", "sequence_id"])
    )
    latest = attempts.sort(["rollout_id", "sequence_id"]).group_by("rollout_id", maintain_order=True).last()
    inputs = dict(
        _frame(storage.bronze_table(cid, manifest, "rollouts", ["rollout_id", "input"])).iter_rows()
    )
    messages = _last_call_messages(_frame(storage.silver_table(cid, "messages", MESSAGE_COLUMNS)))
    rewards = storage.final_rewards(cid)
    out = []
    for rid, aid, _ in latest.sort("rollout_id").iter_rows():
        conversation = messages.get((rid, aid), [])
        answers = [
            m["content"] for m in conversation if m["role"] == "assistant" and m["content"] is not None
        ]
        text = inputs.get(rid)
        out.append(
            ScoredRollout(
                rollout_id=rid,
                attempt_id=aid,
                collection_id=cid,
                task=json.loads(text) if text else None,
                messages=conversation,
                final_response=answers[-1] if answers else None,
                reward=rewards.get((rid, aid)),
            )
        )
    return out


def as_plain(record: ScoredRollout) -> dict[str, Any]:
    """A record as plain data, to send to a worker process."""
    return dataclasses.asdict(record)
