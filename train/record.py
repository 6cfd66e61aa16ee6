"""The run record: ``runs/<run_id>/run.json`` and ``runs/<run_id>/metrics.jsonl``.

run.json is rewritten atomically on every status change, so a reader sees either the
previous or the next state, never half of one; the `runs` view reads it. metrics.jsonl
gets one JSON object per logged step or evaluation, appended as they happen; the
`run_metrics` view reads it and skips a line still being written.
"""

from __future__ import annotations

import datetime as dt
import math
import secrets
from typing import Any

from tracebank.core.versions import installed_versions
from tracebank.warehouse import finite
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
    """Installed versions of the training libraries (those not installed left out)."""
    return {name: version for name, version in installed_versions(LIBRARIES).items() if version}


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
        self.storage.write_run(standard_record(self.record))

    def append_metric(self, event: dict[str, Any]) -> None:
        self.storage.append_metric(self.record.run_id, standard_metric(event))

    def finish(self, status: str, error: str | None = None) -> None:
        self.record.status = status
        self.record.error = error
        self.record.finished_at = now()
        self.attempt.update(status=status, error=error, finished_at=self.record.finished_at)
        self.write()


# Training can produce a NaN or infinite loss (a diverged run is a real outcome); the warehouse holds
# standard JSON only. Such a number is recorded as null, and where it was is named beside it.


def standard_metric(event: dict[str, Any]) -> dict[str, Any]:
    """``event`` with each non-finite number null, and ``non_finite`` naming them (``{"loss": "nan"}``)."""
    bad = {path: str(value) for path, value in finite.non_finite(event)}
    return {**finite.nulled(event), "non_finite": bad} if bad else event


def standard_record(record: RunRecord) -> RunRecord:
    """``record`` with each non-finite number null, and ``summary.non_finite`` listing where they were."""
    doc = record.to_json()
    bad = [path for path, _ in finite.non_finite(doc)]
    if not bad:
        return record
    clean = finite.nulled(doc)
    clean["summary"] = {**(clean.get("summary") or {}), "non_finite": bad}
    return RunRecord.from_json(clean, f"run record {record.run_id}")


def _finite_loss(metric: dict[str, Any]) -> bool:
    loss = metric.get("loss")
    return loss is not None and math.isfinite(loss)


def summarise(metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """Loss summary of a run from its metric events (first/last/min train loss, best eval loss);
    a NaN or infinite loss is left out of it and counted (``non_finite_losses``)."""
    train = [m for m in metrics if m.get("split") == "train" and _finite_loss(m)]
    evals = [m for m in metrics if m.get("split") == "eval" and _finite_loss(m)]
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
    skipped = sum(m.get("loss") is not None and not _finite_loss(m) for m in metrics)
    if skipped:
        out["non_finite_losses"] = skipped
    return out
