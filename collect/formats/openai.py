"""OpenAI-compatible request/response logs (``--format openai``): one chat completion per JSON line.

A line is one of:

- a **log line** ``{"request": <chat completion request body>, "response": <response body>}``
  (what a logging proxy or an ``httpx`` response hook around the ``openai`` client writes);
- an **OpenAI Batch API output line** ``{"id", "custom_id", "response": {"status_code", "body"},
  "error"}``. The output file does not repeat the request, so the line must carry it as a
  sibling ``request``: the request body, or the whole Batch *input* line (``{"custom_id",
  "method", "url", "body"}``) joined by ``custom_id``. Without it, or with ``error`` set or a
  ``status_code`` of 400 or more, the line is a BadRecord.

The response may be vLLM's with ``return_token_ids``: the top-level ``prompt_token_ids`` and the
choice's ``token_ids`` become the call's engine ids, ``choices[0].logprobs.content[].logprob`` its
log-probabilities. Choice 0 is the call; further choices (``n`` > 1) are counted in the
conversation's ``other_choices``, not kept. A streamed response (a list of chunks) is refused:
log the assembled completion.

Conversations: consecutive lines naming the same ``conversation_id`` or ``session_id`` (top level,
or in the request's ``metadata`` map) are one conversation with that id; the key appearing again
after other lines is a BadRecord (a conversation's lines must be consecutive). Any other line is
a conversation of its own, named by the Batch line's ``id`` or else
:func:`~tracebank.collect.conversation.content_id` of the line. A numeric top-level ``reward`` is
the conversation's reward (the last line's, when several carry one).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracebank.collect.conversation import BadRecord, Call, Conversation, content_id
from tracebank.collect.formats.lines import (
    SNIFF_BYTES,
    checked_value,
    finite_number,
    finite_numbers,
    json_lines,
    token_ids,
)

NAME = "openai"
_KEYS = ("conversation_id", "session_id")
_FIRST_KEY = re.compile(rb'\s*\{\s*"(request|custom_id)"\s*:')


def _kind(record: dict[str, Any]) -> str | None:
    """``log`` or ``batch`` for the two line shapes, None for anything else."""
    if isinstance(record.get("request"), dict) and "response" in record and "custom_id" not in record:
        return "log"
    if isinstance(record.get("custom_id"), str) and ("response" in record or "error" in record):
        return "batch"
    return None


def sniff(head: bytes) -> bool:
    """Whether the file's first non-blank line is a log line or a Batch output line."""
    head = head.lstrip()
    end = head.find(b"\n")
    if end < 0 and len(head) >= SNIFF_BYTES:
        # the first line is longer than the head: judge by the keys it names, or starts with
        named = b'"response"' in head and (b'"request"' in head or b'"custom_id"' in head)
        return named or _FIRST_KEY.match(head) is not None
    first = head if end < 0 else head[:end]
    value = checked_value(first, "head")
    return isinstance(value, dict) and _kind(value) is not None


def _messages(value: Any) -> list[dict[str, Any]] | None:
    if isinstance(value, list) and all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in value):
        return value
    return None


def _logprobs(choice: dict[str, Any]) -> list[float] | None | str:
    """The chosen tokens' log-probabilities, None when not asked for, or why they are unreadable."""
    logprobs = choice.get("logprobs")
    if logprobs is None:
        return None
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or not all(isinstance(c, dict) for c in content):
        return "choices[0].logprobs.content is not a list of objects"
    values = finite_numbers([c.get("logprob") for c in content])
    return "choices[0].logprobs.content[].logprob is not a finite number" if values is None else values


def _ids(body: dict[str, Any], key: str, name: str) -> list[int] | None | str:
    value = body.get(key)
    if value is None:
        return None
    ids = token_ids(value)
    return f"{name} is not a list of token ids" if ids is None else ids


def _choice(response: Any) -> dict[str, Any] | str:
    if isinstance(response, list):
        return "a streamed response (a list of chunks): log the assembled completion"
    if not isinstance(response, dict):
        return "response is not an object"
    if isinstance(response.get("error"), dict):
        return f"the response is an error ({str(response['error'].get('message'))[:80]})"
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return "response.choices is not a non-empty list of objects"
    message = choices[0].get("message")
    if not isinstance(message, dict) or message.get("role", "assistant") != "assistant":
        return "choices[0].message is not an assistant message"
    return choices[0]


def call(request: dict[str, Any], response: Any) -> Call | str:
    """One chat completion from its request and response bodies, or why it cannot be read."""
    messages = _messages(request.get("messages"))
    if messages is None:
        return "request.messages is not a list of messages with a role"
    tools = request.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        return "request.tools is not a list of objects"
    choice = _choice(response)
    if isinstance(choice, str):
        return choice
    prompt_ids = _ids(response, "prompt_token_ids", "prompt_token_ids")
    response_ids = _ids(choice, "token_ids", "choices[0].token_ids")
    logprobs = _logprobs(choice)
    for problem in (prompt_ids, response_ids, logprobs):
        if isinstance(problem, str):
            return problem
    assert not isinstance(prompt_ids, str) and not isinstance(response_ids, str)
    assert not isinstance(logprobs, str)
    if logprobs is not None and response_ids is not None and len(logprobs) != len(response_ids):
        return f"{len(logprobs)} logprobs for {len(response_ids)} choices[0].token_ids"
    # vLLM sends every optional field, mostly null; a chat template wants only what is there
    output = {k: v for k, v in choice["message"].items() if v is not None} | {"role": "assistant"}
    model = request.get("model") if isinstance(request.get("model"), str) else response.get("model")
    usage, finish = response.get("usage"), choice.get("finish_reason")
    return Call(
        messages=messages,
        output=output,
        tools=tools or None,
        prompt_token_ids=prompt_ids,
        response_token_ids=response_ids,
        logprobs=logprobs,
        model=model if isinstance(model, str) else None,
        usage=usage if isinstance(usage, dict) else None,
        finish_reason=finish if isinstance(finish, str) else None,
        timestamp=finite_number(response.get("created")),
    )


def _batch_bodies(record: dict[str, Any]) -> tuple[dict[str, Any], Any] | str:
    """The request and response bodies of a Batch output line, or why it has none."""
    response, error = record.get("response"), record.get("error")
    status = response.get("status_code") if isinstance(response, dict) else None
    if error is not None or not isinstance(response, dict) or type(status) is not int or status >= 400:
        detail = error.get("message") if isinstance(error, dict) else None
        return f"batch request failed (status {status}{': ' + str(detail)[:80] if detail else ''})"
    request = record.get("request")
    if isinstance(request, dict) and isinstance(request.get("body"), dict):
        request = request["body"]  # the Batch input line itself
    if not isinstance(request, dict):
        return "a Batch output line without its request: join the input line in as `request`"
    return request, response.get("body")


def _key(record: dict[str, Any]) -> str | None:
    """The conversation id a line names, if any."""
    request = record.get("request")
    metadata = request.get("metadata") if isinstance(request, dict) else None
    for source in (record, metadata if isinstance(metadata, dict) else {}):
        for key in _KEYS:
            if isinstance(source.get(key), str) and source[key]:
                return str(source[key])
    return None


@dataclass
class _Group:
    """The conversation being gathered from consecutive lines."""

    rollout_id: str
    key: str | None
    calls: list[Call] = field(default_factory=list)
    reward: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def add(self, record: dict[str, Any], one: Call) -> None:
        self.calls.append(one)
        reward = finite_number(record.get("reward"))
        self.reward = reward if reward is not None else self.reward
        response = record.get("response")
        body = response.get("body") if isinstance(response, dict) and "body" in response else response
        choices = body.get("choices") if isinstance(body, dict) else None
        if isinstance(choices, list) and len(choices) > 1:
            self.metadata["other_choices"] = self.metadata.get("other_choices", 0) + len(choices) - 1
        if isinstance(record.get("custom_id"), str):
            self.metadata.setdefault("custom_ids", []).append(record["custom_id"])

    def conversation(self) -> Conversation:
        return Conversation(self.rollout_id, self.calls, NAME, self.reward, metadata=self.metadata)


def _line(where: str, record: dict[str, Any]) -> Call | BadRecord:
    kind = _kind(record)
    if kind is None:
        return BadRecord(where, "neither a request/response log line nor a Batch API output line")
    bodies = (record["request"], record["response"]) if kind == "log" else _batch_bodies(record)
    if isinstance(bodies, str):
        return BadRecord(where, bodies)
    one = call(*bodies)
    return BadRecord(where, one) if isinstance(one, str) else one


def _rollout_id(record: dict[str, Any], key: str | None) -> str:
    if key is not None:
        return key
    if isinstance(record.get("custom_id"), str) and isinstance(record.get("id"), str) and record["id"]:
        return str(record["id"])
    return content_id(record)


def _nan_free(record: dict[str, Any]) -> bool:
    """Whether the line is JSON proper: Python's reader takes NaN and Infinity, the hashing and
    the warehouse's writers do not."""
    try:
        content_id(record)
    except ValueError:
        return False
    return True


def parse(path: Path) -> Iterator[Conversation | BadRecord]:
    """The file's conversations in order, one BadRecord per line left out."""
    group: _Group | None = None
    seen: set[str] = set()
    for item in json_lines(path):
        if isinstance(item, BadRecord):
            yield item
            continue
        where, record = item
        one, key = _line(where, record), _key(record)
        if not isinstance(one, BadRecord) and not _nan_free(record):
            one = BadRecord(where, "holds NaN or Infinity, which JSON does not have")
        if isinstance(one, BadRecord):
            yield one
            continue
        if group is not None and (key is None or key != group.key):
            yield group.conversation()
            group = None
        if key is None:
            single = _Group(_rollout_id(record, key), key)
            single.add(record, one)
            yield single.conversation()
            continue
        if group is None:
            if key in seen:
                yield BadRecord(where, f"conversation {key[:80]!r} continues after other lines")
                continue
            seen.add(key)
            group = _Group(_rollout_id(record, key), key)
        group.add(record, one)
    if group is not None:
        yield group.conversation()
