"""ATIF trajectories (``--format atif``): Harbor's Agent Trajectory Interchange Format, v1.0 to v1.7.

A file is one trajectory (a JSON document, pretty-printed or not) or JSON lines of them. A
trajectory is ``{"schema_version": "ATIF-v1.x", "session_id", "agent": {"name", "version",
"model_name", "tool_definitions"}, "steps": [...], "final_metrics", "extra"}``; each step has
``step_id``, ``source`` (``system``, ``user`` or ``agent``), ``message`` (a string, or from v1.6 a
list of content parts) and, for agent steps, ``reasoning_content``, ``tool_calls``
(``tool_call_id``, ``function_name``, ``arguments``), ``observation.results[]`` (``source_call_id``,
``content``) and ``metrics`` (``prompt_tokens``, ``completion_tokens``, from v1.3
``completion_token_ids``, from v1.4 ``prompt_token_ids``, ``logprobs``).

How it becomes a conversation (rollout id = ``session_id``, so re-importing adds nothing):

- system and user steps add a ``system`` / ``user`` message to the history;
- every agent step is one call: the history so far is its prompt, the step's message, reasoning
  and tool calls (arguments JSON-encoded, as OpenAI sends them) its answer, ``metrics`` its engine
  ids and log-probabilities where recorded (token-faithful), else a text call;
- an observation result naming a ``source_call_id`` adds a ``tool`` message, any other result a
  ``user`` message (environment feedback), after the step's answer;
- ``agent.tool_definitions`` (v1.5, OpenAI tool schemas) are every call's ``tools``.

Content parts other than text (images) are left out and counted in ``parts_dropped``; a step
whose ``logprobs`` do not pair one to one with its ``completion_token_ids`` keeps the ids and
drops the log-probabilities (``logprobs_dropped``; the RFC's own example has 44 for 37 ids).
ATIF has no reward field: tracebank reads ``extra.reward`` of the trajectory (the rollout's) and
of a step (that step's). A step that breaks the schema leaves its whole trajectory out, since
the history after it could not be trusted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tracebank.collect.conversation import BadRecord, Call, Conversation, content_id
from tracebank.collect.formats.lines import (
    SNIFF_BYTES,
    checked_value,
    finite_number,
    finite_numbers,
    head,
    json_document,
    json_lines,
    token_ids,
)

NAME = "atif"
_VERSION = re.compile(rb'"schema_version"\s*:\s*"ATIF-v')


class _StepError(ValueError):
    """A step that breaks the schema (its message is the BadRecord's reason)."""


def sniff(head: bytes) -> bool:
    """Whether the file names an ATIF schema version near its start."""
    return _VERSION.search(head) is not None


@dataclass
class _Builder:
    """The history rebuilt step by step, and the calls made so far."""

    tools: list[dict[str, Any]] | None
    model: str | None
    history: list[dict[str, Any]] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def count(self, name: str, n: int = 1) -> None:
        if n:
            self.counts[name] = self.counts.get(name, 0) + n

    def content(self, value: Any, what: str) -> str | list[dict[str, Any]]:
        """A message's content as OpenAI takes it: a string, or its text parts."""
        if isinstance(value, str):
            return value
        if not isinstance(value, list) or not all(isinstance(p, dict) for p in value):
            raise _StepError(f"{what} is neither a string nor a list of content parts")
        texts = [p for p in value if p.get("type") == "text" and isinstance(p.get("text"), str)]
        self.count("parts_dropped", len(value) - len(texts))
        return [{"type": "text", "text": p["text"]} for p in texts]

    def observe(self, step: dict[str, Any], tools_allowed: bool) -> None:
        observation = step.get("observation")
        if observation is None:
            return
        results = observation.get("results") if isinstance(observation, dict) else None
        if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
            raise _StepError("observation.results is not a list of objects")
        for result in results:
            if result.get("content") is None:
                continue  # a subagent reference without a summary: nothing the model saw
            content = self.content(result["content"], "an observation's content")
            call_id = result.get("source_call_id")
            if tools_allowed and isinstance(call_id, str):
                self.history.append({"role": "tool", "tool_call_id": call_id, "content": content})
            else:
                self.history.append({"role": "user", "content": content})

    def agent(self, step: dict[str, Any]) -> None:
        content = self.content(step.get("message"), "message")
        output: dict[str, Any] = {"role": "assistant", "content": content}
        if isinstance(step.get("reasoning_content"), str):
            output["reasoning_content"] = step["reasoning_content"]
        calls = _tool_calls(step.get("tool_calls"))
        if calls:
            output["tool_calls"] = calls
        metrics = {} if step.get("metrics") is None else step["metrics"]
        if not isinstance(metrics, dict):
            raise _StepError("metrics is not an object")
        prompt_ids, response_ids = _ids(metrics, "prompt_token_ids"), _ids(metrics, "completion_token_ids")
        logprobs = finite_numbers(metrics["logprobs"]) if metrics.get("logprobs") is not None else None
        if metrics.get("logprobs") is not None and logprobs is None:
            raise _StepError("metrics.logprobs is not a list of finite numbers")
        if logprobs is not None and response_ids is not None and len(logprobs) != len(response_ids):
            self.count("logprobs_dropped")
            logprobs = None
        usage = {k: metrics[k] for k in ("prompt_tokens", "completion_tokens") if type(metrics.get(k)) is int}
        model = step.get("model_name")
        self.calls.append(
            Call(
                messages=list(self.history),
                output=output,
                tools=self.tools,
                prompt_token_ids=prompt_ids,
                response_token_ids=response_ids,
                logprobs=logprobs,
                model=model if isinstance(model, str) else self.model,
                usage=usage or None,
                finish_reason="tool_calls" if calls else "stop",
                timestamp=_timestamp(step.get("timestamp")),
                reward=_reward(step),
            )
        )
        self.history.append(output)
        self.observe(step, tools_allowed=bool(calls))

    def step(self, step: dict[str, Any]) -> None:
        source = step.get("source")
        if source == "agent":
            self.agent(step)
        elif source in ("system", "user"):
            self.history.append({"role": source, "content": self.content(step.get("message"), "message")})
            self.observe(step, tools_allowed=False)
        else:
            raise _StepError(f"source is {str(source)[:40]!r}, not system, user or agent")


def _ids(metrics: dict[str, Any], key: str) -> list[int] | None:
    if metrics.get(key) is None:
        return None
    ids = token_ids(metrics[key])
    if ids is None:
        raise _StepError(f"metrics.{key} is not a list of token ids")
    return ids


def _tool_calls(value: Any) -> list[dict[str, Any]]:
    """ATIF tool calls as OpenAI's (``arguments`` a JSON string)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(c, dict) for c in value):
        raise _StepError("tool_calls is not a list of objects")
    out = []
    for call in value:
        name, call_id = call.get("function_name"), call.get("tool_call_id")
        arguments = call.get("arguments", {})
        if not isinstance(name, str) or not isinstance(arguments, dict | str) or not isinstance(call_id, str):
            raise _StepError("a tool call lacks a string function_name or tool_call_id, or object arguments")
        text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        out.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": text}})
    return out


def _timestamp(value: Any) -> float | None:
    """An ISO 8601 time in seconds since the epoch (UTC when it names no zone), None if unreadable."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _reward(record: dict[str, Any]) -> float | None:
    extra = record.get("extra")
    return finite_number(extra.get("reward")) if isinstance(extra, dict) else None


def _tools(agent: dict[str, Any]) -> list[dict[str, Any]] | None:
    tools = agent.get("tool_definitions")
    if tools is None:
        return None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise _StepError("agent.tool_definitions is not a list of objects")
    return tools or None


def trajectory(where: str, record: Any) -> Conversation | BadRecord:
    """One trajectory as a conversation, or the BadRecord saying why it is left out."""
    if not isinstance(record, dict):
        return BadRecord(where, f"not a JSON object (a {type(record).__name__})")
    session, steps, agent = record.get("session_id"), record.get("steps"), record.get("agent", {})
    if not isinstance(session, str) or not session:
        return BadRecord(where, "no session_id string")
    where = f"{where} (session {session[:80]})"
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        return BadRecord(where, "steps is not a list of objects")
    if not isinstance(agent, dict):
        return BadRecord(where, "agent is not an object")
    try:
        content_id(record)
    except ValueError:
        return BadRecord(where, "holds NaN or Infinity, which JSON does not have")
    model = agent.get("model_name")
    try:
        builder = _Builder(_tools(agent), model if isinstance(model, str) else None)
    except _StepError as exc:
        return BadRecord(where, str(exc))
    for number, step in enumerate(steps, start=1):
        try:
            builder.step(step)
        except _StepError as exc:
            return BadRecord(where, f"step {number}: {exc}")
    if not builder.calls:
        return BadRecord(where, "no agent step")
    return _conversation(session, record, agent, builder)


def _conversation(
    session: str, record: dict[str, Any], agent: dict[str, Any], builder: _Builder
) -> Conversation:
    first_user = next((m["content"] for m in builder.calls[0].messages if m["role"] == "user"), None)
    metadata: dict[str, Any] = {k: agent[k] for k in ("name", "version") if isinstance(agent.get(k), str)}
    if isinstance(record.get("schema_version"), str):
        metadata["schema_version"] = record["schema_version"]
    metadata.update(builder.counts)
    return Conversation(session, builder.calls, NAME, _reward(record), task=first_user, metadata=metadata)


def _is_lines(head: bytes) -> bool:
    """Whether a file is JSON lines of trajectories rather than one (maybe pretty-printed) document:
    its first line is a whole JSON value (or looks like an object: braces at both ends)."""
    if not head.strip():
        return True  # an empty file: no trajectories, no complaint
    first = head.lstrip().split(b"\n", 1)[0].strip()
    if b"\n" not in head.lstrip() and len(head) >= SNIFF_BYTES:
        return first.startswith(b"{")  # a first line longer than the head: a compact record
    whole = not isinstance(checked_value(first, ""), BadRecord)
    return whole or (first.startswith(b"{") and first.endswith(b"}"))


def parse(path: Path) -> Iterator[Conversation | BadRecord]:
    """The file's trajectories in order, one BadRecord per trajectory left out."""
    if not _is_lines(head(path)):
        document = json_document(path)
        yield document if isinstance(document, BadRecord) else trajectory(path.name, document)
        return
    for item in json_lines(path):
        yield item if isinstance(item, BadRecord) else trajectory(*item)
