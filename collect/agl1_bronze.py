"""Spooled Agent Lightning 1.0 rollouts as bronze rows: ``rollouts``, ``attempts``, ``events``.

The 0.3 tables keep their columns, filled from what 1.0 records: a rollout's
``start_time``/``end_time`` are its status' ``created_at``/``updated_at``, its
``mode`` is ``train`` or ``val`` from ``is_train``, its ``status`` the lifecycle
state. An attempt's times are those of its first and last event, and its
metadata says where the entry came from (hook or REST) and whether its events
are complete. Each event becomes one ``events`` row, its data JSON whole
(the batch redacts credentials in it unless asked not to).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa
from tracebank.collect.agl1_spool import SpoolEntry
from tracebank.collect.batch import redact_event, redact_record
from tracebank.collect.redact import Redactor
from tracebank.warehouse import bronze


def rollout_row(entry: SpoolEntry) -> dict[str, Any]:
    """The ``rollouts`` row of a spooled rollout."""
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


def attempt_row(entry: SpoolEntry, events: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``attempts`` row of a spooled attempt (one per entry: the last, as 1.0 serves it)."""
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


def event_rows(entry: SpoolEntry) -> list[dict[str, Any]]:
    """The ``events`` rows of a spooled attempt, in the order the server recorded them."""
    return [
        {
            "rollout_id": entry.key[0],
            "attempt_id": entry.key[1],
            "position": position,
            "event_type": event.get("event_type"),
            "timestamp": event.get("timestamp"),
            "data": event.get("data"),
        }
        for position, event in enumerate(entry.events())
    ]


def bronze_tables(
    entries: Iterable[SpoolEntry], collection_id: str, redactor: Redactor | None
) -> dict[str, pa.Table]:
    """The bronze tables a collect of ``entries`` commits (``redactor``: None to keep credentials)."""
    rollouts: dict[str, dict[str, Any]] = {}
    attempts, events = [], []
    for entry in entries:
        rows = event_rows(entry)
        rollouts.setdefault(entry.key[0], rollout_row(entry))
        attempts.append(attempt_row(entry, rows))
        events += rows
    if redactor is not None:
        for row in [*rollouts.values(), *attempts]:
            redact_record(redactor, row)
        for row in events:
            redact_event(redactor, row)
    return {
        "rollouts": bronze.rollouts_table(rollouts.values(), collection_id),
        "attempts": bronze.attempts_table(attempts, collection_id),
        "events": bronze.events_table(events, collection_id),
    }
