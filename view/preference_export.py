"""A ``--kind preference`` version as chat: the pairs with their rollouts' recorded messages.

- ``trl-preference``: TRL's conversational preference rows, ``{"prompt": [...], "chosen": [...],
  "rejected": [...]}`` (what ``DPOTrainer`` takes as it is);
- ``openai-preference``: OpenAI's preference fine-tuning JSONL, ``{"input": {"messages": [...]},
  "preferred_output": [...], "non_preferred_output": [...]}``.

A pair names its two rollouts and holds the prompt's token ids; the prompt's messages are those of
the chosen rollout's call with that many prompt tokens, and each side's answer is what followed
it: the call's response (``--unit call``), or every later turn of the trajectory whose requests
extend the previous one (``--unit trajectory``). A pair whose messages were not recorded is
counted, not guessed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
from tracebank.view.conversation import Call, Message, load_conversation
from tracebank.view.errors import ViewError
from tracebank.warehouse import finite


@dataclass(frozen=True)
class Pair:
    """One stored pair with both sides as chat."""

    task: str | None
    prompt: list[Message]
    chosen: list[Message]
    rejected: list[Message]
    chosen_reward: float
    rejected_reward: float
    chosen_rollout_id: str
    rejected_rollout_id: str


def _key(message: Message) -> tuple[Any, ...]:
    return (message.role, message.content, json.dumps(message.tool_calls), message.tool_call_id)


def _answer(calls: list[Call], start: int, trajectory: bool) -> list[Message]:
    """What followed the prompt of ``calls[start]``: its response, then (trajectory) each later turn
    whose request is the conversation so far plus new messages."""
    said = list(calls[start].inputs) + list(calls[start].outputs)
    answer = list(calls[start].outputs)
    for call in calls[start + 1 :] if trajectory else []:
        if [_key(m) for m in call.inputs[: len(said)]] != [_key(m) for m in said] or not call.outputs:
            break
        answer += call.inputs[len(said) :] + call.outputs
        said = list(call.inputs) + list(call.outputs)
    return answer


def _side(
    con: duckdb.DuckDBPyConnection, rollout_id: str, prompt_len: int, trajectory: bool
) -> tuple[Any, ...]:
    """(prompt messages, answer messages) of the rollout's call with ``prompt_len`` prompt tokens."""
    calls = load_conversation(con, rollout_id).calls
    for i, call in enumerate(calls):
        if call.prompt_len == prompt_len and call.inputs and call.outputs and call.reject_reason is None:
            return call.inputs, _answer(calls, i, trajectory)
    return None, None


def iter_pairs(
    con: duckdb.DuckDBPyConnection, name: str, version: int, trajectory: bool
) -> Iterator[Pair | None]:
    """Every pair of ``name@v{version}`` as chat (None for a pair without recorded messages)."""
    rows = con.execute(
        "SELECT task, len(prompt_input_ids) AS prompt_len, chosen_reward, rejected_reward, "
        "chosen_rollout_id, rejected_rollout_id FROM preference_rows WHERE dataset = ? AND version = ?",
        [name, version],
    )
    names = [d[0] for d in rows.description]
    for values in rows.fetchall():
        row = dict(zip(names, values, strict=True))
        prompt, chosen = _side(con, row["chosen_rollout_id"], row["prompt_len"], trajectory)
        _, rejected = _side(con, row["rejected_rollout_id"], row["prompt_len"], trajectory)
        if prompt is None or not chosen or not rejected:
            yield None
            continue
        yield Pair(
            row["task"],
            prompt,
            chosen,
            rejected,
            row["chosen_reward"],
            row["rejected_reward"],
            row["chosen_rollout_id"],
            row["rejected_rollout_id"],
        )


def _plain(messages: list[Message]) -> list[dict[str, Any]]:
    return [m.openai() for m in messages]


def preference_record(fmt: str, pair: Pair) -> dict[str, Any]:
    """One pair in the export format ``fmt``."""
    if fmt == "trl-preference":
        return {
            "prompt": _plain(pair.prompt),
            "chosen": _plain(pair.chosen),
            "rejected": _plain(pair.rejected),
        }
    return {
        "input": {"messages": _plain(pair.prompt)},
        "preferred_output": _plain(pair.chosen),
        "non_preferred_output": _plain(pair.rejected),
    }


def jsonl_line(record: dict[str, Any]) -> str:
    """One line of a JSONL export: standard JSON (a non-finite number as null), text kept as UTF-8,
    U+2028 / U+2029 escaped so that a reader splitting lines on them does not cut the record."""
    return finite.json_line(finite.nulled(record), ensure_ascii=False)


def write_pairs(path: Path, fmt: str, pairs: Iterator[Pair | None]) -> tuple[int, int]:
    """Write the pairs as JSONL to ``path`` (the output guard's temp file); (written, skipped)."""
    written = skipped = 0
    with path.open("w", encoding="utf-8") as f:
        for pair in pairs:
            if pair is None:
                skipped += 1
                continue
            f.write(jsonl_line(preference_record(fmt, pair)) + "\n")
            written += 1
        f.flush()
        os.fsync(f.fileno())
    if not written:
        raise ViewError(
            f"none of the {skipped} pairs has recorded messages, so there is nothing to write",
            "the silver `messages` table is built from litellm_request spans; were they collected?",
        )
    return written, skipped
