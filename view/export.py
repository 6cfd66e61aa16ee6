"""`export NAME@vN`: a dataset version in the formats trainers take.

- ``openai``: OpenAI chat fine-tuning JSONL, one ``{"messages": [...], "tools": [...]}`` per
  row (``tools`` ``[]`` when the call offered none), tool calls as ``tool_calls``; assistant
  turns the version does not train get ``weight: 0``. ``collect PATH --format chat`` reads it back.
- ``trl-prompt-completion``: TRL's conversational prompt-completion rows: TRL trains on
  the completion only, which is what the version trains.
- ``trl-messages``: TRL's conversational ``{"messages": [...]}`` rows (TRL trains every
  turn unless ``assistant_only_loss`` and a template with generation markers).
- ``hf``: a ``datasets`` folder (``save_to_disk``, one split per dataset split) with the
  prompt-completion columns and the stored ``input_ids``/``labels``/``reward``.

Rows reach their messages through ``llm_calls`` (see ``conversation``); a row whose call
has no recorded messages cannot be written as chat and is counted, not guessed.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from tracebank.core.outputs import OutputGuard
from tracebank.view.config import EXPORT_FORMATS, PREFERENCE_FORMATS, ExportConfig
from tracebank.view.conversation import (
    BATCH_ROWS,
    DatasetRow,
    Message,
    VersionRows,
    iter_rows,
    served_models,
    version_rows,
)
from tracebank.view.errors import ViewError, ViewUsageError
from tracebank.view.preference_export import iter_pairs, jsonl_line, write_pairs
from tracebank.view.roundtrip import RoundTrip, check_row
from tracebank.view.tables import READ
from tracebank.view.tokenizer import load_tokenizer, local_model_dir
from tracebank.warehouse import finite
from tracebank.warehouse.contract import IGNORE_INDEX
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.query import connect


@dataclass
class ExportResult:
    """What was written and how faithful it is."""

    dataset: str
    version: int
    format: str
    output: Path
    rows: int
    skipped: int
    round_trip: RoundTrip | None
    tokenizer: str | None = None

    def summary(self) -> str:
        lines = [
            f"exported {self.rows:,} rows of {self.dataset}@v{self.version} as {self.format} to {self.output}"
        ]
        if self.skipped:
            lines.append(f"skipped {self.skipped:,} rows whose call has no recorded messages")
        if self.format in PREFERENCE_FORMATS:
            pass  # pairs are written from their recorded messages; there is no row to round-trip
        elif self.round_trip is None:
            lines.append("round trip not checked (pass --tokenizer with the model's chat template)")
        else:
            lines.append(self.round_trip.summary(str(self.tokenizer)))
        return "\n".join(lines)


def trained_runs(labels: list[int]) -> int:
    """How many separate stretches of trained tokens a row has (1, or more when calls were merged)."""
    runs, inside = 0, False
    for lab in labels:
        if lab != IGNORE_INDEX and not inside:
            runs += 1
        inside = lab != IGNORE_INDEX
    return runs


def openai_messages(row: DatasetRow) -> list[dict[str, Any]]:
    """The row's conversation with ``weight`` on every assistant turn (1 where the version trains it)."""
    assert row.call is not None
    # Merged rows train the replies of earlier calls too: the last (runs - 1) assistant inputs.
    earlier_trained = max(0, trained_runs(row.labels) - 1)
    assistant_inputs = [i for i, m in enumerate(row.call.inputs) if m.role == "assistant"]
    trained_inputs = (
        set(assistant_inputs[len(assistant_inputs) - earlier_trained :]) if earlier_trained else set()
    )
    out = []
    for i, m in enumerate(row.call.inputs):
        msg = m.openai()
        if m.role == "assistant":
            msg["weight"] = 1 if i in trained_inputs else 0
        out.append(msg)
    for m in row.call.outputs:
        out.append({**m.openai(), "weight": 1})
    return out


def _plain(messages: list[Message]) -> list[dict[str, Any]]:
    return [m.openai() for m in messages]


def prompt_completion(row: DatasetRow) -> dict[str, Any]:
    assert row.call is not None
    return {"prompt": _plain(row.call.inputs), "completion": _plain(row.call.outputs)}


def _record(fmt: str, row: DatasetRow) -> dict[str, Any]:
    assert row.call is not None
    if fmt == "openai":
        record: dict[str, Any] = {"messages": openai_messages(row)}
    elif fmt == "trl-messages":
        record = {"messages": _plain(row.call.inputs + row.call.outputs)}
    else:
        record = prompt_completion(row)
    if fmt == "openai":  # on every row, [] too: seed 003's trainer reads row["tools"] unguarded
        record["tools"] = row.call.tools or []
    elif row.call.tools:
        record["tools"] = row.call.tools
    return record


def _usable(row: DatasetRow) -> bool:
    return row.call is not None and bool(row.call.inputs) and bool(row.call.outputs)


@dataclass
class _Tally:
    """Counts kept while rows stream past: written, skipped, and the round trip."""

    tokenizer: Any
    rows: int = 0
    written: int = 0
    round_trip: RoundTrip | None = None

    def __post_init__(self) -> None:
        self.round_trip = RoundTrip() if self.tokenizer is not None else None

    def see(self, row: DatasetRow) -> bool:
        self.rows += 1
        if self.round_trip is not None:
            self.round_trip.add(check_row(self.tokenizer, row))
        ok = _usable(row)
        self.written += ok
        return ok


def _write_jsonl(guard: OutputGuard, fmt: str, rows: Iterator[DatasetRow], tally: _Tally) -> None:
    with guard.writing() as tmp:
        with tmp.open("w", encoding="utf-8") as f:
            for row in rows:
                if tally.see(row):
                    f.write(jsonl_line(_record(fmt, row)) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if not tally.written:
            raise _nothing_usable(tally)


def _json_text(value: Any) -> str:
    """A value held as JSON text in a column (standard JSON: a non-finite number as null)."""
    return finite.dumps(finite.nulled(value))


def _hf_record(row: DatasetRow) -> dict[str, Any]:
    return {
        **{k: _json_text(v) for k, v in prompt_completion(row).items()},
        "tools": _json_text(row.call.tools) if row.call is not None and row.call.tools else None,
        "input_ids": row.input_ids,
        "labels": row.labels,
        "reward": row.reward,
        "rollout_id": row.rollout_id,
        "attempt_id": row.attempt_id,
        "span_id": row.span_id,
    }


HF_SCHEMA = pa.schema(
    [
        ("prompt", pa.string()),
        ("completion", pa.string()),
        ("tools", pa.string()),
        ("input_ids", pa.list_(pa.int32())),
        ("labels", pa.list_(pa.int32())),
        ("reward", pa.float64()),
        ("rollout_id", pa.string()),
        ("attempt_id", pa.string()),
        ("span_id", pa.string()),
    ]
)


def _stage_split(path: Path, rows: Iterator[DatasetRow], tally: _Tally) -> int:
    """Stream one split's usable rows into an Arrow stream file a batch at a time; how many were written.

    (An Arrow stream file is what ``datasets`` memory-maps, so the split is never all in memory.)
    """
    written = 0
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, HF_SCHEMA) as writer:
        batch: list[dict[str, Any]] = []
        for row in rows:
            if tally.see(row):
                batch.append(_hf_record(row))
            if len(batch) >= BATCH_ROWS:
                writer.write_table(pa.Table.from_pylist(batch, schema=HF_SCHEMA))
                written, batch = written + len(batch), []
        if batch:
            writer.write_table(pa.Table.from_pylist(batch, schema=HF_SCHEMA))
            written += len(batch)
    return written


def _write_hf(
    guard: OutputGuard, con: duckdb.DuckDBPyConnection, version: VersionRows, tally: _Tally
) -> None:
    """A ``datasets`` folder (save_to_disk), built from per-split Arrow files, never all in memory."""
    import datasets
    from datasets import Dataset, DatasetDict

    datasets.disable_progress_bars()  # the CLI prints one summary line instead
    with guard.writing() as tmp:
        stage = tmp.with_name(tmp.name + "-staging")
        stage.mkdir()
        try:
            parts = {}
            for split in version.splits:
                staged = stage / f"{split}.arrow"
                if _stage_split(staged, iter_rows(con, dataclasses.replace(version, splits=(split,))), tally):
                    parts[split] = Dataset.from_file(str(staged))
            if not tally.written:
                raise _nothing_usable(tally)
            DatasetDict(parts).save_to_disk(str(tmp))
        finally:
            shutil.rmtree(stage, ignore_errors=True)


def _nothing_usable(tally: _Tally) -> ViewError:
    return ViewError(
        f"none of the {tally.rows} rows has recorded messages, so there is nothing to write",
        "the silver `messages` table is built from litellm_request spans; were they collected?",
    )


def output_guard(wh: Warehouse, config: ExportConfig) -> OutputGuard:
    """The guard of ``export -o``: a folder for ``hf``, a file for the JSONL formats."""
    return OutputGuard(
        config.output,
        kind="folder" if config.format == "hf" else "file",
        warehouse_root=wh.root,
        command="export",
        overwrite=config.force,
        overwrite_flag="--force",
    )


def _export_pairs(
    guard: OutputGuard, config: ExportConfig, version: VersionRows, wh: Warehouse
) -> ExportResult:
    trajectory = version.manifest["params"]["preference"]["unit"] == "trajectory"
    con = connect(wh, only=set(READ) | {"preference_rows"})
    try:
        with guard.writing() as tmp:
            written, skipped = write_pairs(
                tmp, config.format, iter_pairs(con, version.name, version.version, trajectory)
            )
    finally:
        con.close()
    return ExportResult(version.name, version.version, config.format, guard.path, written, skipped, None)


def export(wh: Warehouse, config: ExportConfig) -> ExportResult:
    """Write ``config.dataset`` in ``config.format``, streaming its rows; see the module docstring."""
    config.validate()
    guard = output_guard(wh, config)
    guard.check()  # before any work: a refused path costs nothing
    version = version_rows(wh, config.dataset, config.split)
    kind = (version.manifest.get("params") or {}).get("kind", "sft")
    if (config.format in PREFERENCE_FORMATS) != (kind == "preference"):
        fits = ", ".join(PREFERENCE_FORMATS if kind == "preference" else EXPORT_FORMATS)
        raise ViewUsageError(
            f"{version.ref} is a {kind} version; --format {config.format} does not fit it", f"use {fits}"
        )
    if kind == "preference":
        return _export_pairs(guard, config, version, wh)
    con = connect(wh, only=set(READ))
    try:
        tok_dir = config.tokenizer or local_model_dir(served_models(con, version))
        tally = _Tally(load_tokenizer(tok_dir) if tok_dir else None)
        if config.format == "hf":
            _write_hf(guard, con, version, tally)
        else:
            _write_jsonl(guard, config.format, iter_rows(con, version), tally)
    finally:
        con.close()
    return ExportResult(
        version.name,
        version.version,
        config.format,
        guard.path,
        tally.written,
        tally.rows - tally.written,
        tally.round_trip,
        tok_dir,
    )
