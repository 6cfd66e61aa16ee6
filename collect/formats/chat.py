"""Chat files: one conversation per JSON line, ``{"messages": [...], "tools": [...]}`` (seed 003's
``train.jsonl`` / ``valid.jsonl``, what ``export --to openai`` writes), with an optional ``reward``
(a finite number: the conversation's reward) and an optional ``id`` (a short printable string:
the rollout id; without one the rollout id is the line's :func:`content_id`).

Each assistant message is one call: its request is every message before it, its output the
message, its tools the line's ``tools``. So a multi-turn line gives several calls and the last
call's request holds all earlier turns. Every field is checked (the file is hostile): a line
with a wrong type is a BadRecord naming ``FILE:LINE`` and why, and the rest of the file is kept.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tracebank.collect.conversation import BadRecord, Call, Conversation, content_id
from tracebank.collect.formats.lines import json_lines
from tracebank.warehouse.finite import first_non_finite, reward_problem

NAME = "chat"
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
MAX_ID_CHARS = 200
_NOT_CHAT = ("response", "choices", "request", "custom_id", "body", "resourceSpans", "steps")


def sniff(head: bytes) -> bool:
    """Whether the first line is a JSON object with a ``messages`` list and no request/response
    log keys (those are the ``openai`` format's)."""
    line = head.lstrip().split(b"\n", 1)[0]
    try:
        value = json.loads(line)
    except ValueError:  # the first line is longer than the head: judge by its start
        return line.startswith(b'{"messages":') or line.startswith(b'{"messages": ')
    return (
        isinstance(value, dict)
        and isinstance(value.get("messages"), list)
        and not any(key in value for key in _NOT_CHAT)
    )


def _content_problem(content: Any) -> str | None:
    if content is None or isinstance(content, str):
        return None
    if not isinstance(content, list):
        return f"`content` is a {type(content).__name__}, not text, null or a list of parts"
    for part in content:
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            return "`content` holds a part that is not an object with a `type`"
    return None


def _tool_calls_problem(calls: Any) -> str | None:
    if calls is None:
        return None
    if not isinstance(calls, list):
        return "`tool_calls` is not a list"
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            return "a tool call has no `function.name`"
        if not isinstance(function.get("arguments", ""), str | dict):
            return "a tool call's `function.arguments` is not text or an object"
        if not isinstance(call.get("id", ""), str | None):
            return "a tool call's `id` is not text"
    return None


def _message_problem(message: Any) -> str | None:
    if not isinstance(message, dict):
        return "is not an object"
    role = message.get("role")
    if role not in ROLES:
        return f"has an unknown role {str(role)[:40]!r}"
    for key in ("name", "tool_call_id"):
        if not isinstance(message.get(key, ""), str | None):
            return f"`{key}` is not text"
    return _content_problem(message.get("content")) or _tool_calls_problem(message.get("tool_calls"))


def _messages_problem(messages: Any) -> str | None:
    if not isinstance(messages, list):
        return "`messages` is missing or not a list"
    for i, message in enumerate(messages):
        if problem := _message_problem(message):
            return f"message {i} {problem}"
    if not any(m["role"] == "assistant" for m in messages):
        return "no assistant message (nothing was answered)"
    return None


def _tools_problem(tools: Any) -> str | None:
    if tools is None:
        return None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        return "`tools` is not a list of objects"
    return None


def _reward_problem(reward: Any) -> str | None:
    if reward is None:
        return None
    if isinstance(reward, bool) or not isinstance(reward, int | float):
        return f"`reward` is not a number ({str(reward)[:40]!r})"
    if (why := reward_problem(float(reward))) is not None:
        return f"`reward` is unusable ({why})"
    return None


def _id_problem(rid: Any) -> str | None:
    if rid is None:
        return None
    if not isinstance(rid, str) or not rid or len(rid) > MAX_ID_CHARS or not rid.isprintable():
        return f"`id` is not a printable string of 1 to {MAX_ID_CHARS} characters"
    return None


def record_problem(record: dict[str, Any]) -> str | None:
    """Why a chat line cannot be imported; None when it can."""
    if (where := first_non_finite(record)) is not None:
        return f"`{where[0]}` is {where[1]} (not standard JSON)"
    return (
        _reward_problem(record.get("reward"))
        or _id_problem(record.get("id"))
        or _tools_problem(record.get("tools"))
        or _messages_problem(record.get("messages"))
    )


def conversation(record: dict[str, Any], where: str) -> Conversation:
    """A checked chat line as a conversation: one call per assistant message."""
    messages, tools = record["messages"], record.get("tools") or None
    calls = [
        Call(messages=messages[:i], output=message, tools=tools)
        for i, message in enumerate(messages)
        if message["role"] == "assistant"
    ]
    reward = record.get("reward")
    return Conversation(
        rollout_id=record.get("id") or content_id(record),
        calls=calls,
        source=NAME,
        reward=None if reward is None else float(reward),
        metadata={"record": where},
    )


def parse(path: Path) -> Iterator[Conversation | BadRecord]:
    """The file's conversations in order; one BadRecord per line left out."""
    for item in json_lines(path):
        if isinstance(item, BadRecord):
            yield item
            continue
        where, record = item
        problem = record_problem(record)
        yield BadRecord(where, problem) if problem else conversation(record, where)
