"""The one shape every text or log source hands over: conversations of OpenAI-format chat calls.

A chat file, an OpenAI / vLLM request log, an ATIF trajectory or a batch of OpenTelemetry
GenAI spans is parsed into :class:`Conversation` values (or a :class:`BadRecord` naming the
record and why it was left out); from there everything is shared. A conversation becomes one
Agent Lightning 1.0 spool entry (:func:`spool_entry`): a rollout with one attempt whose events
are a ``model_request`` per call (the request's messages and tools, the response's message and,
where the source recorded them, the served token ids) and a ``reward`` event per reward. The
1.0 collect path then commits it (claim, redaction, exactly-once, one manifest) and the 1.0
silver builder turns it into ``llm_calls``, ``messages`` and ``rewards`` rows.

Ids: a source's own id where it has one; otherwise :func:`content_id`, the sha256 of the
record's canonical JSON (sorted keys, no spaces, UTF-8), so importing the same record twice
names the same rollout and the second import adds nothing.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from tracebank.collect.agl1_hook import SPOOL_FORMAT

ATTEMPT_ID = "1"
"""The attempt id of every imported conversation (a file records one attempt of each)."""


@dataclass(frozen=True)
class Call:
    """One chat completion: what was asked and what the model answered."""

    messages: list[dict[str, Any]]
    """The request's OpenAI-format messages (``role``, ``content``, ``tool_calls``, ``tool_call_id``)."""
    output: dict[str, Any]
    """The assistant message the model answered with (``role`` ``assistant``)."""
    tools: list[dict[str, Any]] | None = None
    """The request's tool definitions (OpenAI JSON schemas), None when it offered none."""
    prompt_token_ids: list[int] | None = None
    """The prompt's ids as the serving engine tokenized it, when the source recorded them."""
    response_token_ids: list[int] | None = None
    """The answer's ids as the engine sampled them, when recorded."""
    logprobs: list[float] | None = None
    """The chosen tokens' log-probabilities, one per response token, when recorded."""
    model: str | None = None
    """The model name the request named."""
    usage: dict[str, Any] | None = None
    """Token counts as the source reported them (``prompt_tokens``, ``completion_tokens``)."""
    finish_reason: str | None = None
    """Why the answer ended (``stop``, ``length``, ``tool_calls``)."""
    timestamp: float | None = None
    """When the call was made, in seconds since the epoch."""
    reward: float | None = None
    """A reward of this step, where the format has one."""


@dataclass(frozen=True)
class Conversation:
    """One rollout: its calls in order and the reward of the whole."""

    rollout_id: str
    """The source's id of the conversation, else :func:`content_id` of its record."""
    calls: list[Call]
    """The chat calls, in the order they were made."""
    source: str
    """The format it came from (``chat``, ``openai``, ``otlp``, ``atif``)."""
    reward: float | None = None
    """The conversation's reward (the rollout's), None when the record has none."""
    task: Any = None
    """The rollout's input (the task), when the format records one."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Anything else worth keeping about the record (plain JSON values)."""


@dataclass(frozen=True)
class BadRecord:
    """A record left out of an import, and why (one line, shown and counted; the rest is kept)."""

    where: str
    """Which record: ``FILE:LINE`` or a span or trajectory id."""
    reason: str
    """Why it was left out, in one line."""

    def line(self) -> str:
        return f"{self.where}: {self.reason}"


def content_id(record: Any) -> str:
    """The id of a record that carries none: ``sha256:`` and the first 32 hex digits of the sha256
    of its canonical JSON (sorted keys, no spaces, UTF-8), the same for the same record anywhere."""
    text = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _response(call: Call) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "message": call.output, "finish_reason": call.finish_reason}
    if call.response_token_ids is not None:
        choice["token_ids"] = call.response_token_ids
    if call.logprobs is not None:
        choice["logprobs"] = {"content": [{"logprob": lp} for lp in call.logprobs]}
    response: dict[str, Any] = {"choices": [choice]}
    if call.prompt_token_ids is not None:
        response["prompt_token_ids"] = call.prompt_token_ids
    if call.usage is not None:
        response["usage"] = call.usage
    return response


def call_event(call: Call) -> dict[str, Any]:
    """The 1.0 ``model_request`` event of one call."""
    request: dict[str, Any] = {"messages": call.messages}
    if call.tools:
        request["tools"] = call.tools
    data = {"model": call.model, "status": "ok", "request": request, "response": _response(call)}
    return {"event_type": "model_request", "timestamp": call.timestamp, "data": data}


def reward_event(value: float, timestamp: float | None, source: str) -> dict[str, Any]:
    """The 1.0 ``reward`` event of one reward."""
    return {"event_type": "reward", "timestamp": timestamp, "data": {"value": value, "source": source}}


def events(conversation: Conversation) -> list[dict[str, Any]]:
    """The attempt's events: each call, then its step reward; the conversation's reward last."""
    out: list[dict[str, Any]] = []
    for call in conversation.calls:
        out.append(call_event(call))
        if call.reward is not None:
            out.append(reward_event(call.reward, call.timestamp, conversation.source))
    if conversation.reward is not None:
        last = conversation.calls[-1].timestamp if conversation.calls else None
        out.append(reward_event(conversation.reward, last, conversation.source))
    return out


def spool_entry(conversation: Conversation) -> dict[str, Any]:
    """The conversation as a 1.0 spool entry (the record the 1.0 collect path commits)."""
    times = [c.timestamp for c in conversation.calls if c.timestamp is not None]
    status = {"created_at": min(times) if times else None, "updated_at": max(times) if times else None}
    return {
        "format": SPOOL_FORMAT,
        "source": conversation.source,
        "spooled_at": None,
        "rollout_id": conversation.rollout_id,
        "attempt_id": ATTEMPT_ID,
        "state": "succeeded",
        "events_complete": True,
        "rollout": {
            "rollout_id": conversation.rollout_id,
            "input": conversation.task,
            "status": status,
            "metadata": dict(conversation.metadata),
            "is_train": True,
        },
        "events_by_attempt": {ATTEMPT_ID: events(conversation)},
    }
