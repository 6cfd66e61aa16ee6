"""Listing and showing run records (`tracebank runs list | show`)."""

from __future__ import annotations

from typing import Any

from tracebank.train.errors import TrainError
from tracebank.warehouse import catalog
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.query import ResultRows, sql_rows
from tracebank.warehouse.storage import Storage


def _loss_arrow(summary: dict[str, Any]) -> str | None:
    first, last = summary.get("train_loss_first"), summary.get("train_loss_last")
    if first is None or last is None:
        return None
    return f"{first:.4f}->{last:.4f}"


#: One row per run, oldest first, from the ``runs`` view (``summary`` is its JSON text).
RUNS_SQL = """
SELECT run_id, status, dataset, backend,
       CAST(json_extract(summary, '$.steps') AS BIGINT) AS steps,
       printf('%.4f->%.4f', CAST(json_extract(summary, '$.train_loss_first') AS DOUBLE),
              CAST(json_extract(summary, '$.train_loss_last') AS DOUBLE)) AS train_loss,
       CAST(json_extract(summary, '$.eval_loss_best') AS DOUBLE) AS eval_loss_best,
       CAST(json_extract(summary, '$.tokens_per_s') AS DOUBLE) AS tokens_per_s,
       started_at
FROM runs
WHERE $status IS NULL OR status = $status
ORDER BY run_id
"""


def runs_table(wh: Warehouse, status: str | None = None) -> ResultRows:
    """One row per run (of ``status`` only, when given), oldest first: id, status, dataset,
    backend, steps, loss, eval, tokens/s, start."""
    return sql_rows(wh, RUNS_SQL, {"status": status})


def run_details(wh: Warehouse, run_id: str) -> dict[str, Any]:
    """The run record (prefix of the id is enough) with its metric events under ``metrics``."""
    wh.check_format()
    ids = [folder.name for folder, _ in Storage(wh).runs()]
    prefixed = [i for i in ids if i.startswith(run_id)]
    if run_id not in ids and len(prefixed) > 1:
        raise TrainError(
            f"run id prefix {run_id!r} matches {len(prefixed)} runs",
            "give more of the id (see `tracebank runs list`)",
        )
    folder, record = catalog.resolve_run(wh, run_id)
    return {**record.to_json(), "metrics": Storage(wh).run_metrics(folder)}


def _attempt_lines(attempts: list[dict[str, Any]]) -> list[str]:
    """One line per attempt of a resumed run (none for a run started once)."""
    if len(attempts) < 2:
        return []
    lines = []
    for attempt in attempts:
        resumed, last, error = (
            attempt.get("resumed_from_step"),
            attempt.get("last_checkpoint"),
            attempt.get("error"),
        )
        lines.append(
            f"attempt {attempt.get('attempt')}  {attempt.get('status')}"
            + (f" from the step-{resumed} checkpoint" if resumed is not None else "")
            + f", {attempt.get('started_at')} -> {attempt.get('finished_at')}"
            + (f", last checkpoint step {last}" if last else "")
            + (f": {error}" if error else "")
        )
    return lines


def format_run(details: dict[str, Any]) -> str:
    """A readable, stable text rendering of one run for the terminal."""
    summary = details.get("summary") or {}
    data = details.get("data") or {}
    model = details.get("model") or {}
    hp = details.get("hyperparameters") or {}
    resolved = details.get("resolved") or {}
    lines = [
        f"run        {details.get('run_id')}",
        f"status     {details.get('status')}" + (f": {details['error']}" if details.get("error") else ""),
        f"dataset    {details.get('dataset')}  (content hash {details.get('content_hash')})",
        f"base model {details.get('base_model')}",
        f"backend    {details.get('backend')}"
        + (
            f"  device {resolved.get('device')}, bf16 {resolved.get('bf16')}, "
            f"4-bit {resolved.get('load_in_4bit')}, optim {resolved.get('optim')}"
            if resolved
            else ""
        ),
        f"output     {details.get('output_dir')}  (save {details.get('save')})",
        f"started    {details.get('started_at')}   finished {details.get('finished_at')}",
    ]
    if data:
        lines.append(
            f"data       rows {data.get('rows')}, max length {data.get('max_length')} "
            f"(longest row {data.get('dataset_max_length')}), truncated {data.get('truncated_rows')}"
        )
    if model.get("trainable_params") is not None:
        trained = "weights" if hp.get("finetune") == "full" else "adapter"
        lines.append(
            f"{trained:<10} {model['trainable_params']:,} trainable of {model.get('total_params'):,} "
            f"parameters ({model.get('trainable_percent')}%)"
        )
    keys = (
        "lora_r",
        "lora_alpha",
        "lora_dropout",
        "learning_rate",
        "batch_size",
        "grad_accum",
        "warmup_steps",
        "lr_scheduler",
        "epochs",
        "max_steps",
        "seed",
    )
    lines.append("hyper      " + ", ".join(f"{k}={hp.get(k)}" for k in keys))
    if summary:

        def num(key: str) -> str:
            value = summary.get(key)
            return f"{value:.4f}" if isinstance(value, float) else str(value)

        lines.append(
            f"summary    steps {summary.get('steps')}, train loss {_loss_arrow(summary)} "
            f"(min {num('train_loss_min')}), eval best {num('eval_loss_best')}, "
            f"tokens {summary.get('trained_tokens')}, {summary.get('tokens_per_s')} tokens/s, "
            f"wall {summary.get('wall_s')}s"
        )
    lines += _attempt_lines(details.get("attempts") or [])
    best = details.get("best_checkpoint")
    if best:
        lines.append(
            f"best       checkpoint of step {best.get('step')} (eval loss {best.get('eval_loss'):.4f}) "
            "is the saved model"
        )
    metrics = details.get("metrics") or []
    if metrics:
        lines.append("")
        lines.append(f"{'step':>6}  {'split':<5}  {'epoch':>6}  {'loss':>9}  {'lr':>9}  {'tokens':>8}")
        for m in metrics:
            epoch = f"{m['epoch']:.2f}" if m.get("epoch") is not None else ""
            lr = f"{m['learning_rate']:.2e}" if m.get("learning_rate") is not None else ""
            lines.append(
                f"{m.get('step'):>6}  {m.get('split'):<5}  {epoch:>6}  {m.get('loss'):>9.4f}  "
                f"{lr:>9}  {m.get('tokens') if m.get('tokens') is not None else '':>8}"
            )
    return "\n".join(lines)
