"""`show`: rollouts and dataset rows as conversations in the terminal."""

from __future__ import annotations

import duckdb
from tracebank.core.text import visible
from tracebank.view.config import ShowConfig
from tracebank.view.conversation import iter_rows, load_conversation, ranked_rollouts, version_rows
from tracebank.view.errors import NothingToShowError
from tracebank.view.preference_view import is_preference, pair_at, pair_text
from tracebank.view.tables import READ
from tracebank.view.text import conversation_text, dataset_row_text
from tracebank.view.tokenizer import load_tokenizer
from tracebank.view.tokens import decoder
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.query import connect


def show(wh: Warehouse, config: ShowConfig) -> str:
    """The text `tracebank show` prints for ``config``, control characters of the traces made
    visible (:func:`tracebank.core.text.visible`)."""
    return visible(_show(wh, config))


def _show(wh: Warehouse, config: ShowConfig) -> str:
    config.validate()
    con = connect(wh, only=set(READ))
    try:
        if config.dataset:
            return _show_row(wh, con, config)
        if config.rollout_id is not None:
            ids = [config.rollout_id]
        else:
            ids = ranked_rollouts(con, config.best or config.worst, best=config.best > 0)
        texts = [conversation_text(load_conversation(con, rid), config.max_chars) for rid in ids]
        return "\n\n".join(texts)
    finally:
        con.close()


def _show_row(wh: Warehouse, con: duckdb.DuckDBPyConnection, config: ShowConfig) -> str:
    assert config.dataset is not None
    rows = version_rows(wh, config.dataset)
    if is_preference(rows):
        return pair_text(rows, config.row, pair_at(con, rows, config.row), config.max_chars)
    row = next((r for r in iter_rows(con, rows) if r.index == config.row), None)
    if row is None:
        n = int(rows.manifest.get("rows") or 0)
        raise NothingToShowError(f"{rows.ref} has {n} rows; no row {config.row}", f"use --row 0..{n - 1}")
    decode = decoder(load_tokenizer(config.tokenizer)) if config.tokenizer else None
    return dataset_row_text(row, config.max_chars, decode)
