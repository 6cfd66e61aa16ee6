"""Spooled Agent Lightning 1.0 rollouts as bronze rows: ``rollouts``, ``attempts``, ``events``.

The 0.3 tables keep their columns, filled from what 1.0 records: a rollout's
``start_time``/``end_time`` are its status' ``created_at``/``updated_at``, its
``mode`` is ``train`` or ``val`` from ``is_train``, its ``status`` the lifecycle
state. An attempt's times are those of its first and last event, and its
metadata says where the entry came from (hook or REST) and whether its events
are complete. Each event becomes one ``events`` row, its data JSON whole
(credentials redacted unless asked not to).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa
from tracebank.collect.agl1_spool import SpoolEntry
from tracebank.collect.redact import Redactor
from tracebank.warehouse import bronze


def _rollout_row(entry: SpoolEntry) -> dict[str, Any]:
    rollout = entry.data["rollout"]
    status = rollout.get("status") or {}
    return {
        "rollout_id": entry.key[0],
        "input": rollout.get("input"),
        "start_time": status.get("created_at"),
        "end_time": status.get("updated_at"),
        "mode": "train" if rollout.get("is_train", True) else "val",
        "status": entry.data.get("state"),
        "config": rollout.get("config"),
        "metadata": {**(rollout.get("metadata") or {}), "error_message": status.get("error_message")},
    }


def _attempt_row(entry: SpoolEntry, events: list[dict[str, Any]]) -> dict[str, Any]:
    times = [float(e["timestamp"]) for e in events if e.get("timestamp") is not None]
    return {
        "rollout_id": entry.key[0],
        "attempt_id": entry.key[1],
        "start_time": min(times) if times else None,
        "end_time": max(times) if times else None,
        "status": entry.data.get("state"),
        "metadata": {
            "source": entry.data.get("source"),
            "events_complete": entry.data.get("events_complete"),
            "spooled_at": entry.data.get("spooled_at"),
        },
    }


def _event_rows(entry: SpoolEntry, redactor: Redactor | None) -> list[dict[str, Any]]:
    rows = []
    for position, event in enumerate(entry.events()):
        data = event.get("data")
        rows.append(
            {
                "rollout_id": entry.key[0],
                "attempt_id": entry.key[1],
                "position": position,
                "event_type": event.get("event_type"),
                "timestamp": event.get("timestamp"),
                "data": data if redactor is None else redactor.value(None, data),
            }
        )
    return rows


def bronze_tables(
    entries: Iterable[SpoolEntry], collection_id: str, redactor: Redactor | None
) -> dict[str, pa.Table]:
    """The bronze tables of spooled entries (one attempt per entry: the last, as 1.0 serves it)."""
    rollouts, attempts, events = [], [], []
    for entry in entries:
        rows = _event_rows(entry, redactor)
        rollouts.append(_rollout_row(entry))
        attempts.append(_attempt_row(entry, rows))
        events += rows
    return {
        "rollouts": bronze.rollouts_table(rollouts, collection_id),
        "attempts": bronze.attempts_table(attempts, collection_id),
        "events": bronze.events_table(events, collection_id),
    }
