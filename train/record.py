"""The run record: ``runs/<run_id>/run.json`` and ``runs/<run_id>/metrics.jsonl``.

run.json is rewritten atomically on every status change, so a reader sees either the
previous or the next state, never half of one; the `runs` view reads it. metrics.jsonl
gets one JSON object per logged step or evaluation, appended as they happen; the
`run_metrics` view reads it and skips a line still being written.
"""

from __future__ import annotations

import datetime as dt
import secrets
from importlib import metadata
from typing import Any

from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.records import RunRecord
from tracebank.warehouse.storage import Storage

__all__ = ["RunRecord", "RunWriter", "library_versions", "new_run_id", "now", "summarise"]

LIBRARIES = ("torch", "transformers", "trl", "peft", "datasets", "accelerate", "unsloth", "bitsandbytes")


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def new_run_id(dataset: str) -> str:
    """Sortable by start time, readable, unique: ``20260105-120301-mathsft-3f9a``."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{dataset[:40]}-{secrets.token_hex(2)}"


def library_versions() -> dict[str, str]:
    """Installed versions of the training libraries (read from package metadata, nothing imported)."""
    out = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


class RunWriter:
    """Owns one run's folder: the only writer of its run.json and metrics.jsonl.

    Each start of the run (the first, and every ``--resume``) is one entry of
    ``record.attempts``; :attr:`attempt` is the current one.
    """

    def __init__(self, wh: Warehouse, record: RunRecord, resumed_from_step: int | None = None) -> None:
        self.storage = Storage(wh)
        self.record = record
        record.attempts.append(
            {
                "attempt": len(record.attempts) + 1,
                "status": "running",
                "started_at": now(),
                "finished_at": None,
                "error": None,
                "owner": record.owner,
                "resumed_from_step": resumed_from_step,
                "last_checkpoint": None,
            }
        )
        if resumed_from_step is None:
            self.folder = self.storage.start_run(record)
        else:
            self.folder = wh.run_dir(record.run_id)
            self.write()

    @property
    def attempt(self) -> dict[str, Any]:
        return self.record.attempts[-1]

    def write(self) -> None:
        self.storage.write_run(self.record)

    def append_metric(self, event: dict[str, Any]) -> None:
        self.storage.append_metric(self.record.run_id, event)

    def finish(self, status: str, error: str | None = None) -> None:
        self.record.status = status
        self.record.error = error
        self.record.finished_at = now()
        self.attempt.update(status=status, error=error, finished_at=self.record.finished_at)
        self.write()


def summarise(metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """Loss summary of a run from its metric events (first/last/min train loss, best eval loss)."""
    train = [m for m in metrics if m.get("split") == "train" and m.get("loss") is not None]
    evals = [m for m in metrics if m.get("split") == "eval" and m.get("loss") is not None]
    out: dict[str, Any] = {
        "train_loss_first": train[0]["loss"] if train else None,
        "train_loss_last": train[-1]["loss"] if train else None,
        "train_loss_min": min(m["loss"] for m in train) if train else None,
        "eval_loss_first": evals[0]["loss"] if evals else None,
        "eval_loss_last": evals[-1]["loss"] if evals else None,
        "eval_loss_best": min(m["loss"] for m in evals) if evals else None,
        "evaluations": len(evals),
    }
    if evals:
        best = min(evals, key=lambda m: m["loss"])
        out["eval_best_step"] = best.get("step")
    return out
