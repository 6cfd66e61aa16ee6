"""Rollouts and dataset rows read back as conversations from the silver tables.

A proxied chat call is one ``sequence_id`` of an attempt: its ``llm_calls`` row (the
``raw_gen_ai_request`` span, or the ``litellm_request`` span when that one carries the
ids) and its ``messages`` rows (from the ``litellm_request`` span) share
``(rollout_id, attempt_id, sequence_id)``; that triple is the join key, not ``span_id``.
A dataset row names its call's span, so it reaches its messages through ``llm_calls``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa
from tracebank.view.errors import NothingToShowError
from tracebank.warehouse.catalog import resolve_dataset
from tracebank.warehouse.contract import IGNORE_INDEX, RAW_LLM_SPAN
from tracebank.warehouse.location import Warehouse


@dataclass
class Message:
    """One chat message as the model saw it (or produced it)."""

    role: str
    content: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    tool_call_id: str | None = None

    def openai(self) -> dict[str, Any]:
        """This message in the OpenAI chat format (``tool_calls`` are stored in it already)."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = self.tool_calls
        if self.tool_call_id:
            out["tool_call_id"] = self.tool_call_id
        return out


@dataclass
class Call:
    """One proxied chat call of an attempt."""

    sequence_id: int
    span_id: str
    model: str | None
    prompt_len: int | None
    response_len: int | None
    reject_reason: str | None
    inputs: list[Message] = field(default_factory=list)
    outputs: list[Message] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    agent: str | None = None  # record text: printed terminal-safe like every other


@dataclass
class Reward:
    sequence_id: int
    name: str | None
    value: float


@dataclass
class Conversation:
    """An attempt's calls and rewards in sequence order."""

    rollout_id: str
    attempt_id: str
    collection_id: str | None
    task: str | None
    calls: list[Call]
    rewards: list[Reward]

    @property
    def final_reward(self) -> float | None:
        return self.rewards[-1].value if self.rewards else None


def _message(row: dict[str, Any]) -> Message:
    calls = json.loads(row["tool_calls"]) if row.get("tool_calls") else []
    return Message(
        role=row.get("role") or "?",
        content=row.get("content") or "",
        tool_calls=calls,
        tool_call_id=row.get("tool_call_id"),
    )


def _attach(call: Call, msgs: list[dict[str, Any]]) -> None:
    """Give ``call`` its messages (rows of the messages table) and the request's tools."""
    call.inputs = [_message(m) for m in msgs if m["direction"] == "input"]
    call.outputs = [_message(m) for m in msgs if m["direction"] == "output"]
    tools = next((m["tools"] for m in msgs if m.get("tools")), None)
    call.tools = json.loads(tools) if tools else []


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    rel = con.execute(sql, params)
    names = [d[0] for d in rel.description]
    return [dict(zip(names, r, strict=True)) for r in rel.fetchall()]


def _messages_of(con: duckdb.DuckDBPyConnection, rollout_id: str, attempt_id: str) -> dict[int, list[dict]]:
    rows = _rows(
        con,
        "SELECT * FROM messages WHERE rollout_id = ? AND attempt_id = ? "
        "ORDER BY sequence_id, direction, message_index",
        [rollout_id, attempt_id],
    )
    out: dict[int, list[dict]] = {}
    for r in rows:
        out.setdefault(r["sequence_id"], []).append(r)
    return out


def _calls_of(con: duckdb.DuckDBPyConnection, rollout_id: str, attempt_id: str) -> list[Call]:
    rows = _rows(
        con,
        "SELECT sequence_id, span_id, model, prompt_len, response_len, reject_reason, agent FROM llm_calls "
        "WHERE rollout_id = ? AND attempt_id = ? "
        f"ORDER BY sequence_id, reject_reason IS NOT NULL, span_name <> '{RAW_LLM_SPAN}', start_time",
        [rollout_id, attempt_id],
    )
    messages = _messages_of(con, rollout_id, attempt_id)
    calls: dict[int, Call] = {}
    for r in rows:
        if r["sequence_id"] in calls:
            continue  # the usable raw_gen_ai_request span of the call comes first
        calls[r["sequence_id"]] = Call(**r)
    for seq, msgs in messages.items():
        call = calls.setdefault(seq, Call(seq, "", None, None, None, "no token ids recorded"))
        _attach(call, msgs)
    return [calls[s] for s in sorted(calls)]


def resolve_rollout(con: duckdb.DuckDBPyConnection, prefix: str) -> tuple[str, str, str | None]:
    """(rollout_id, latest attempt_id, collection_id) of the rollout ``prefix`` names."""
    rows = _rows(
        con,
        "SELECT rollout_id, arg_max(attempt_id, sequence_id) AS attempt_id, "
        "arg_max(collection_id, sequence_id) AS collection_id FROM attempts "
        "WHERE starts_with(rollout_id, ?) GROUP BY rollout_id ORDER BY rollout_id",
        [prefix],
    )
    exact = [r for r in rows if r["rollout_id"] == prefix]
    if exact:
        rows = exact
    if not rows:
        raise NothingToShowError(
            f"no rollout {prefix!r} in the warehouse",
            'list them with `tracebank sql "SELECT rollout_id FROM rollouts"`',
        )
    if len(rows) > 1:
        names = ", ".join(r["rollout_id"] for r in rows[:5])
        raise NothingToShowError(
            f"{prefix!r} matches {len(rows)} rollouts ({names}, ...)", "give more of the id"
        )
    r = rows[0]
    return r["rollout_id"], r["attempt_id"], r["collection_id"]


def load_conversation(
    con: duckdb.DuckDBPyConnection, rollout_id: str, attempt_id: str | None = None
) -> Conversation:
    """The calls and rewards of ``rollout_id`` (its latest attempt unless ``attempt_id``)."""
    rid, latest, collection_id = resolve_rollout(con, rollout_id)
    aid = attempt_id or latest
    task = _rows(con, "SELECT input FROM rollouts WHERE rollout_id = ? LIMIT 1", [rid])
    rewards = _rows(
        con,
        "SELECT sequence_id, name, value FROM rewards WHERE rollout_id = ? AND attempt_id = ? "
        "ORDER BY sequence_id, start_time",
        [rid, aid],
    )
    return Conversation(
        rollout_id=rid,
        attempt_id=aid,
        collection_id=collection_id,
        task=task[0]["input"] if task else None,
        calls=_calls_of(con, rid, aid),
        rewards=[Reward(**r) for r in rewards],
    )


def ranked_rollouts(con: duckdb.DuckDBPyConnection, n: int, best: bool) -> list[str]:
    """The ``n`` rollout ids with the highest (``best``) or lowest final reward."""
    order = "DESC" if best else "ASC"
    rows = _rows(
        con,
        "SELECT rollout_id FROM rollout_rewards WHERE reward IS NOT NULL "
        f"ORDER BY reward {order}, rollout_id LIMIT ?",
        [n],
    )
    if not rows:
        raise NothingToShowError(
            "no rewarded rollout in the warehouse", 'check `tracebank sql "SELECT * FROM rewards"`'
        )
    return [r["rollout_id"] for r in rows]


@dataclass
class DatasetRow:
    """One row of a dataset version with the call it came from."""

    dataset: str
    version: int
    split: str
    index: int
    input_ids: list[int]
    labels: list[int]
    reward: float | None
    rollout_id: str
    attempt_id: str
    span_id: str
    call: Call | None

    @property
    def prompt_len(self) -> int:
        """Leading label positions masked with -100 (the prompt the row does not train on)."""
        n = 0
        for x in self.labels:
            if x != IGNORE_INDEX:
                break
            n += 1
        return n

    @property
    def trained(self) -> int:
        return sum(1 for x in self.labels if x != IGNORE_INDEX)


#: Rows are read and joined to their calls this many at a time, so memory stays flat.
BATCH_ROWS = 512
SPLITS = ("train", "validation")


@dataclass(frozen=True)
class VersionRows:
    """A resolved dataset version whose rows can be streamed (train first, in file order)."""

    name: str
    version: int
    manifest: dict[str, Any]
    splits: tuple[str, ...]

    @property
    def ref(self) -> str:
        return f"{self.name}@v{self.version}"


def version_rows(wh: Warehouse, ref: str, split: str | None = None) -> VersionRows:
    resolved, _, manifest = resolve_dataset(wh, ref)
    assert resolved.version is not None
    return VersionRows(resolved.name, resolved.version, manifest.to_json(), (split,) if split else SPLITS)


def served_models(con: duckdb.DuckDBPyConnection, rows: VersionRows) -> list[str]:
    """The models that answered the calls of the version's rows, most rows first."""
    found = _rows(
        con,
        "SELECT c.model, count(*) AS n FROM dataset_rows d "
        "JOIN llm_calls c USING (rollout_id, attempt_id, span_id) "
        "WHERE d.dataset = ? AND d.version = ? AND c.model IS NOT NULL "
        "GROUP BY c.model ORDER BY n DESC, c.model",
        [rows.name, rows.version],
    )
    return [r["model"] for r in found]


def iter_rows(con: duckdb.DuckDBPyConnection, rows: VersionRows) -> Iterator[DatasetRow]:
    """Every row of the version, each joined to its call's messages, a batch at a time."""
    _stage_calls(con, rows)
    index = 0
    for split in rows.splits:
        result = con.execute(
            "SELECT input_ids, labels, reward, rollout_id, attempt_id, span_id FROM dataset_rows "
            "WHERE dataset = ? AND version = ? AND split = ?",
            [rows.name, rows.version, split],
        )
        names = [d[0] for d in result.description]
        while batch := result.fetchmany(BATCH_ROWS):
            raw = [dict(zip(names, r, strict=True)) for r in batch]
            calls = _calls_by_span(con, {(r["rollout_id"], r["attempt_id"]) for r in raw})
            for r in raw:
                key = (r["rollout_id"], r["attempt_id"], r["span_id"])
                yield DatasetRow(rows.name, rows.version, split, index, call=calls.get(key), **r)
                index += 1


def _stage_calls(con: duckdb.DuckDBPyConnection, rows: VersionRows) -> None:
    """Copy the version's calls and their messages (text only) out of the Parquet views once.

    Each batch then looks its calls up in these small tables instead of scanning every
    collection's silver files again. (A schema of their own keeps them out of SHOW TABLES.)
    """
    con.execute("CREATE SCHEMA IF NOT EXISTS view_stage")
    con.execute(
        "CREATE OR REPLACE TABLE view_stage.calls AS SELECT c.rollout_id, c.attempt_id, c.span_id, "
        "c.sequence_id, c.model, c.prompt_len, c.response_len, c.reject_reason, c.agent "
        "FROM llm_calls c SEMI JOIN "
        "(SELECT rollout_id, attempt_id, span_id FROM dataset_rows WHERE dataset = ? AND version = ?) d "
        "USING (rollout_id, attempt_id, span_id)",
        [rows.name, rows.version],
    )
    con.execute(
        "CREATE OR REPLACE TABLE view_stage.messages AS SELECT m.* FROM messages m "
        "SEMI JOIN view_stage.calls c USING (rollout_id, attempt_id, sequence_id)"
    )


def _calls_by_span(
    con: duckdb.DuckDBPyConnection, attempts: set[tuple[str, str]]
) -> dict[tuple[str, str, str], Call]:
    """Calls of these attempts keyed by (rollout, attempt, span) of their llm_calls span."""
    if not attempts:
        return {}
    con = con.cursor()  # the caller is still fetching from its own result
    pairs = sorted(attempts)
    con.register(
        "_wanted", pa.table({"rollout_id": [p[0] for p in pairs], "attempt_id": [p[1] for p in pairs]})
    )
    spans = _rows(
        con,
        "SELECT c.rollout_id, c.attempt_id, c.span_id, c.sequence_id, c.model, c.prompt_len, c.response_len, "
        "c.reject_reason, c.agent FROM view_stage.calls c JOIN _wanted USING (rollout_id, attempt_id)",
        [],
    )
    msgs = _rows(
        con,
        "SELECT m.* FROM view_stage.messages m JOIN _wanted USING (rollout_id, attempt_id) "
        "ORDER BY m.rollout_id, m.attempt_id, m.sequence_id, m.direction, m.message_index",
        [],
    )
    by_seq: dict[tuple[str, str, int], list[dict]] = {}
    for m in msgs:
        by_seq.setdefault((m["rollout_id"], m["attempt_id"], m["sequence_id"]), []).append(m)
    out: dict[tuple[str, str, str], Call] = {}
    for s in spans:
        key = (s["rollout_id"], s["attempt_id"], s["sequence_id"])
        call = Call(
            s["sequence_id"],
            s["span_id"],
            s["model"],
            s["prompt_len"],
            s["response_len"],
            s["reject_reason"],
            agent=s["agent"],
        )
        _attach(call, by_seq.get(key, []))
        out[(s["rollout_id"], s["attempt_id"], s["span_id"])] = call
    return out
