"""Token rows for calls recorded without token ids (chat files, OpenTelemetry spans: text only).

Such a call's silver ``llm_calls`` row has no prompt ids (reject reason ``no_prompt_ids``); its
``messages`` rows hold the text. With ``--tokenizer`` (:class:`TextInputs`) these calls take the
recipe's path as far as the rewards (rules 1-5: latest attempt, reward matching, carried
rewards), then become rows here instead of in ``transform.rows``:

- by default one row per conversation: the rollout's last rewarded text call's messages plus its
  answer, rendered with its tools (``transform.text_render``); every assistant token is trained,
  system, user and tool text is -100;
- with ``--per-turn`` one row per text call (each assistant turn): its messages plus its answer,
  only the answer trained.

Calls with engine ids are untouched (their rows, scratch files and fast copies stay as they were);
:class:`WithTextRows` hands out both kinds of rows in any order. Without ``--tokenizer`` text calls
are refused when nothing else could make a row, else left out and counted (``text_calls_skipped``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
from tracebank.core.arrowutil import arrow_ints, numpy_view
from tracebank.transform.errors import TransformUsageError
from tracebank.transform.ids import IdNames
from tracebank.transform.rows import ROW_CALL_COLUMNS, RowTokens
from tracebank.transform.text_render import ChatRenderer, Rendered, parse_json_list
from tracebank.warehouse.contract import IGNORE_INDEX

_NO_INTS = np.zeros(0, np.int32)
RENDER_BATCH = 256
"""Conversations rendered per batch encode (the tokenizer splits a batch over every core)."""

TEXT_REASON = "no_prompt_ids"
"""The silver reject reason of a call recorded without prompt ids: a text call."""

MESSAGE_COLUMNS = [
    "rollout_id",
    "attempt_id",
    "span_id",
    "direction",
    "message_index",
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "tools",
]

#: (collection position, its calls' (rollout_id, attempt_id, span_id)) -> their silver ``messages`` rows.
MessageLoader = Callable[[int, pl.DataFrame], pl.DataFrame]


@dataclass
class TextInputs:
    """What rendering text calls needs: the tokenizer, the messages, and the manifest's counts."""

    renderer: ChatRenderer
    load_messages: MessageLoader
    per_turn: bool = False
    counts: dict[str, Any] = field(default_factory=dict)


def mark_text_calls(calls: pl.DataFrame, text: TextInputs | None) -> tuple[pl.DataFrame, int]:
    """``calls`` with the text calls made usable and marked (column ``text``) when there is a
    tokenizer; and how many text calls there are. Without one, TransformUsageError when no other
    call is usable (the text calls stay rejected otherwise, and the caller counts them)."""
    is_text = pl.col("reject_reason") == TEXT_REASON
    n = int(calls.select(is_text.sum()).item() or 0)
    if n == 0:
        return calls, 0
    if text is None:
        if calls.get_column("reject_reason").null_count() == 0:
            raise TransformUsageError(
                f"{n:,} calls have no token ids (text-only conversations): pass --tokenizer MODEL to render "
                "them with its chat template",
                "a model folder, or a hub id already in the Hugging Face cache",
            )
        return calls, n
    return (
        calls.with_columns(
            is_text.fill_null(False).alias("text"),
            pl.when(is_text).then(None).otherwise(pl.col("reject_reason")).alias("reject_reason"),
        ),
        n,
    )


@dataclass(frozen=True)
class TextTokens:
    """The rendered rows' ids and labels, in memory (row ``k``: ``values[offsets[k]:offsets[k+1]]``)."""

    offsets: np.ndarray
    ids: np.ndarray
    labels: np.ndarray


@dataclass(frozen=True)
class WithTextRows(RowTokens):
    """Engine rows (as :class:`RowTokens` copies them) and rendered text rows (``text_row`` set)."""

    text: TextTokens = field(default_factory=lambda: TextTokens(np.zeros(1, np.int64), _NO_INTS, _NO_INTS))

    def materialize(
        self, rows: pl.DataFrame, into: Any = None
    ) -> tuple[pa.Array, pa.Array, pa.Array, int | None]:
        if "text_row" not in rows.columns or rows.get_column("text_row").null_count() == rows.height:
            return super().materialize(rows, into)
        is_text = rows.get_column("text_row").is_not_null().to_numpy()
        lengths = rows.get_column("length").to_numpy().astype(np.int64)
        offsets = np.zeros(rows.height + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        ids = np.empty(int(offsets[-1]), np.int32)
        labels = np.empty(int(offsets[-1]), np.int32)
        engine = rows.filter(pl.Series(~is_text))
        if engine.height:  # its own arrays (not ``into``'s buffers): they are copied from below
            e_ids, _, e_labels, _ = super().materialize(engine, None)
            e_off = numpy_view(e_ids.offsets).astype(np.int64)
            e_id_values, e_label_values = numpy_view(e_ids.values), numpy_view(e_labels.values)
            for k, row in enumerate(np.flatnonzero(~is_text).tolist()):
                a, b = offsets[row], offsets[row + 1]
                ids[a:b] = e_id_values[e_off[k] : e_off[k + 1]]
                labels[a:b] = e_label_values[e_off[k] : e_off[k + 1]]
        t = self.text
        texts = rows.get_column("text_row").to_numpy()
        for row in np.flatnonzero(is_text).tolist():
            k = int(texts[row])
            a, b = offsets[row], offsets[row + 1]
            ids[a:b] = t.ids[t.offsets[k] : t.offsets[k + 1]]
            labels[a:b] = t.labels[t.offsets[k] : t.offsets[k + 1]]
        max_id = int(ids.max()) if len(ids) else None
        off = arrow_ints(offsets.astype(np.int32))
        return (
            pa.ListArray.from_arrays(off, arrow_ints(ids)),
            pa.ListArray.from_arrays(off, arrow_ints(np.ones(len(ids), np.int32))),
            pa.ListArray.from_arrays(off, arrow_ints(labels)),
            max_id,
        )


def split_text_calls(rewarded: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """(engine calls, text calls) of the rewarded calls; no text part when none were marked."""
    if "text" not in rewarded.columns:
        return rewarded, None
    is_text = rewarded.get_column("text")
    return rewarded.filter(~is_text).drop("text"), rewarded.filter(is_text).drop("text")


def add_text_rows(
    rows: pl.DataFrame, source: RowTokens, text_calls: pl.DataFrame, text: TextInputs, names: IdNames
) -> tuple[pl.DataFrame, WithTextRows]:
    """The engine rows plus a row per rendered conversation (or turn), and what copies them all."""
    planned, tokens = plan_text_rows(text_calls, text, names)
    rows = rows.with_columns(pl.lit(None, pl.Int64).alias("text_row"))
    both = pl.concat([rows, planned.select(rows.columns)], how="vertical_relaxed")
    mixed = WithTextRows(source.tokens, source.tok, source.prompt_len, source.response_len, tokens)
    return both, mixed


def plan_text_rows(calls: pl.DataFrame, text: TextInputs, names: IdNames) -> tuple[pl.DataFrame, TextTokens]:
    """Render the text calls (sorted by rollout, call index) into rows; counts go to ``text.counts``."""
    if calls.height:
        text.renderer.require_marks()
    calls = calls.sort(["rollout_id", "call_index"])
    members = calls.group_by("rollout_id", maintain_order=True).len().get_column("len")
    if not text.per_turn:  # a conversation is its last call: its messages hold the turns before
        calls = calls.group_by("rollout_id", maintain_order=True).last()
    named = names.name(calls.select("rollout_id", "attempt_id", "span_id"))
    messages = messages_of(
        pl.concat([calls.select("source_order"), named], how="horizontal_extend"), text.load_messages
    )
    found = []
    missing = 0
    for i, (rollout, attempt, span) in enumerate(named.iter_rows()):
        conversation = messages.get((rollout, attempt, span))
        if not conversation or conversation[0][-1].get("role") != "assistant":
            missing += 1
            continue
        found.append((i, (*conversation, rollout)))
    kept, rendered = [], []
    failed, first_failed = 0, None
    for start in range(0, len(found), RENDER_BATCH):
        batch = found[start : start + RENDER_BATCH]
        outs = text.renderer.render_many([c for _, c in batch], answer_only=text.per_turn)
        for (i, (_, _, rollout)), out in zip(batch, outs, strict=True):
            if isinstance(out, Exception):
                failed += 1
                first_failed = first_failed or f"{rollout}: {type(out).__name__}: {str(out)[:200]}"
                continue
            rendered.append(out)
            kept.append(i)
    text.counts.update(
        calls=int(members.sum()),
        rows=len(kept),
        per_turn=text.per_turn,
        no_messages=missing,
        render_failed=failed,
        first_render_failure=first_failed,
        template_drops=text.renderer.drops.as_dict(),
        tokenizer=text.renderer.info,
    )
    return _rows_frame(calls, kept, rendered, None if text.per_turn else members), _tokens(rendered)


def messages_of(
    calls: pl.DataFrame, load: MessageLoader, answer: bool = True
) -> dict[tuple[str, str, str], tuple[list[dict[str, Any]], list[Any] | None]]:
    """(messages + answer, tools) of each call (with ``answer=False`` the request's messages only),
    from its collection's silver ``messages``; ``calls``: source_order and the named ids."""
    out: dict[tuple[str, str, str], tuple[list[dict[str, Any]], list[Any] | None]] = {}
    for (order,), keys in calls.group_by("source_order", maintain_order=True):
        rows = load(int(order), keys.select("rollout_id", "attempt_id", "span_id"))
        rows = rows.sort(["rollout_id", "attempt_id", "span_id", "direction", "message_index"])
        for key, group in _call_groups(rows):
            inputs = [chat_message(m) for m in group if m["direction"] == "input"]
            outputs = [chat_message(m) for m in group if m["direction"] == "output"]
            tools = parse_json_list(group[0]["tools"])
            out[key] = (inputs + outputs[:1] if answer else inputs, tools)
    return out


def _call_groups(rows: pl.DataFrame) -> Iterator[tuple[tuple[str, str, str], list[dict[str, Any]]]]:
    """The rows of each call, in order, of ``rows`` sorted by call (one pass over Python lists: a
    polars group per call costs more than the call's rows)."""
    columns = ["rollout_id", "attempt_id", "span_id", "direction", "role", "content", "tool_calls"]
    columns += ["tool_call_id", "tools"]
    group: list[dict[str, Any]] = []
    raw: tuple[Any, ...] | None = None  # the key as stored: a null and "None" are two calls, as in polars
    for values in zip(*(rows.get_column(c).to_list() for c in columns), strict=True):
        if values[:3] != raw and group:
            yield _key(group[0]), group
            group = []
        raw = values[:3]
        group.append(dict(zip(columns, values, strict=True)))
    if group:
        yield _key(group[0]), group


def _key(row: dict[str, Any]) -> tuple[str, str, str]:
    return str(row["rollout_id"]), str(row["attempt_id"]), str(row["span_id"])


def chat_message(row: dict[str, Any]) -> dict[str, Any]:
    """A silver ``messages`` row as the OpenAI-format message a chat template reads (a null content
    stays None, as in the source: templates test for it, as Qwen's do)."""
    message: dict[str, Any] = {"role": row["role"], "content": row["content"]}
    calls = parse_json_list(row["tool_calls"])
    if calls:
        message["tool_calls"] = calls
    if row["tool_call_id"]:
        message["tool_call_id"] = row["tool_call_id"]
    return message


def _rows_frame(
    calls: pl.DataFrame, kept: list[int], rendered: list[Rendered], members: pl.Series | None
) -> pl.DataFrame:
    """The row plan of the rendered calls, in :func:`transform.rows.build_rows`' columns."""
    lengths = np.array([len(r.ids) for r in rendered], np.int64)
    trained = np.array([int(r.trained.sum()) for r in rendered], np.int64)
    picked = calls[kept]
    n_calls = members.gather(kept) if members is not None else pl.repeat(1, len(kept), eager=True)
    return picked.select(*ROW_CALL_COLUMNS, pl.col("call_index").cast(pl.Int32)).with_columns(
        n_calls.cast(pl.Int32).alias("calls"),
        pl.Series("length", lengths, dtype=pl.Int64),
        pl.Series("trained", trained, dtype=pl.Int64),
        pl.lit(-1, pl.Int64).alias("first"),  # not an engine call: ``text_row`` addresses its tokens
        pl.lit(-1, pl.Int64).alias("last"),
        pl.Series("text_row", np.arange(len(kept), dtype=np.int64)),
    )


def _tokens(rendered: list[Rendered]) -> TextTokens:
    offsets = np.zeros(len(rendered) + 1, np.int64)
    np.cumsum([len(r.ids) for r in rendered], out=offsets[1:])
    if not rendered:
        return TextTokens(offsets, _NO_INTS, _NO_INTS)
    ids = np.concatenate([r.ids for r in rendered]).astype(np.int32)
    labels = np.where(np.concatenate([r.trained for r in rendered]), ids, IGNORE_INDEX).astype(np.int32)
    return TextTokens(offsets, ids, labels)
