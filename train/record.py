"""The run record: ``runs/<run_id>/run.json`` and ``runs/<run_id>/metrics.jsonl``.

run.json is rewritten atomically on every status change, so a reader sees either the
previous or the next state, never half of one; the `runs` view reads it. metrics.jsonl
gets one JSON object per logged step or evaluation, appended as they happen; the
`run_metrics` view reads it and skips a line still being written.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from tracebank.warehouse.commit import write_json_atomic
from tracebank.warehouse.layout import Warehouse

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


@dataclass
class RunRecord:
    """Everything about one training run; ``run.json`` is this, as JSON."""

    run_id: str
    status: str  # running | succeeded | failed
    dataset: str
    content_hash: str | None
    base_model: str
    backend: str
    output_dir: str
    save: str
    hyperparameters: dict[str, Any]
    libraries: dict[str, str]
    started_at: str
    finished_at: str | None = None
    error: str | None = None
    resolved: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    best_checkpoint: dict[str, Any] | None = None
    log_file: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


class RunWriter:
    """Owns one run's folder: the only writer of its run.json and metrics.jsonl."""

    def __init__(self, wh: Warehouse, record: RunRecord) -> None:
        self.folder = wh.run_dir(record.run_id)
        self.folder.mkdir(parents=True, exist_ok=False)
        self.record = record
        self.metrics_path = self.folder / "metrics.jsonl"
        self.metrics_path.touch()
        self.write()

    @property
    def run_json(self) -> Path:
        return self.folder / "run.json"

    def write(self) -> None:
        write_json_atomic(self.run_json, self.record.to_dict())

    def append_metric(self, event: dict[str, Any]) -> None:
        with open(self.metrics_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(event, sort_keys=True) + "\n")
            fh.flush()

    def finish(self, status: str, error: str | None = None) -> None:
        self.record.status = status
        self.record.error = error
        self.record.finished_at = now()
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
