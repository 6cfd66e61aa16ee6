"""The run record and metrics.jsonl stay standard JSON when training produces a NaN or an infinite loss."""

from __future__ import annotations

import json

from tracebank.train.record import RunWriter, summarise
from tracebank.warehouse.query import run_sql
from tracebank.warehouse.storage import Storage

from tests.warehouse.test_records import _run


def _strict(text, where):
    def refuse(name):
        raise ValueError(f"{where} holds {name}")

    return json.loads(text, parse_constant=refuse)


def _strict_lines(path):
    return [_strict(line, path) for line in path.read_text().splitlines()]


def test_a_nan_loss_is_recorded_as_null_with_a_flag(wh):
    writer = RunWriter(wh, _run())
    metrics = [
        {"step": 1, "split": "train", "loss": 2.5},
        {"step": 2, "split": "train", "loss": float("nan"), "grad_norm": float("inf")},
        {"step": 3, "split": "train", "loss": 2.0},
    ]
    for event in metrics:
        writer.append_metric(event)
    writer.record.summary = {**summarise(metrics), "train_loss_mean": float("nan")}
    writer.finish("succeeded")

    lines = _strict_lines(writer.folder / "metrics.jsonl")
    assert lines[1] == {
        "step": 2,
        "split": "train",
        "loss": None,
        "grad_norm": None,
        "non_finite": {"loss": "nan", "grad_norm": "inf"},
    }
    summary = _strict((writer.folder / "run.json").read_text(), "run.json")["summary"]
    assert summary["train_loss_mean"] is None and summary["non_finite"] == ["summary.train_loss_mean"]
    assert summary["train_loss_min"] == 2.0 and summary["non_finite_losses"] == 1
    assert Storage(wh).read_run("r1").status == "succeeded"
    losses = run_sql(wh, "SELECT step, loss FROM run_metrics ORDER BY step").to_pylist()
    assert losses == [{"step": 1, "loss": 2.5}, {"step": 2, "loss": None}, {"step": 3, "loss": 2.0}]


def test_a_nan_an_older_tracebank_wrote_reads_as_null(wh):
    writer = RunWriter(wh, _run())
    (writer.folder / "metrics.jsonl").write_text('{"step": 1, "split": "train", "loss": NaN}\n')
    assert Storage(wh).run_metrics(writer.folder) == [{"step": 1, "split": "train", "loss": None}]
