"""Hermes tool calls, parsed the way vLLM's ``--tool-call-parser hermes`` does (vLLM 0.32).

A model that calls a tool writes ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
(Qwen, Hermes and most ChatML models). vLLM turns that text into OpenAI ``tool_calls``:

- whole response: every ``<tool_call>`` region (closed, or open at the end) is JSON;
  the text before the first tag is the content (None when empty); arguments are
  re-serialised with ``json.dumps(..., ensure_ascii=False)``. Text that does not
  parse stays plain content, with no tool call.
- streamed: content is sent until a ``<tool_call>`` tag starts (a suffix that could
  be the start of the tag is held back), then the tool's name once it is complete
  (with its id), then the arguments text as it grows (without the closing brace of
  the outer object once the call is complete).

Also the inverse for prompts: assistant ``tool_calls`` arguments arrive as JSON strings
and are rendered as objects, as vLLM does before applying the chat template.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

START, END = "<tool_call>", "</tool_call>"
_REGION = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)
_NAME = re.compile(r'"name"\s*:\s*"([^"]+)"')
_ARGUMENTS = re.compile(r'"arguments"\s*:\s*')


def tool_call_id() -> str:
    """An id in vLLM's format: ``chatcmpl-tool-`` and 16 hex digits."""
    return f"chatcmpl-tool-{secrets.token_hex(8)}"


def parse_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """(content, tool_calls) of a whole response; no tool calls when there is none or it is not JSON."""
    if START not in text:
        return text, []
    try:
        calls = [json.loads(closed or open_) for closed, open_ in _REGION.findall(text)]
        tool_calls = [
            {
                "id": tool_call_id(),
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": json.dumps(call["arguments"], ensure_ascii=False),
                },
            }
            for call in calls
        ]
    except (ValueError, KeyError, TypeError):
        return text, []
    content = text[: text.find(START)]
    return content or None, tool_calls


def _tag_overlap(text: str, tag: str) -> int:
    """Length of the longest proper prefix of ``tag`` that ``text`` ends with."""
    for k in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:k]):
            return k
    return 0


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _call_regions(text: str) -> list[tuple[str, bool]]:
    """(JSON text, complete) of every ``<tool_call>`` region seen so far."""
    regions: list[tuple[str, bool]] = []
    pos = 0
    while (start := text.find(START, pos)) != -1:
        body_start = start + len(START)
        end = text.find(END, body_start)
        if end != -1:
            regions.append((text[body_start:end].strip(), True))
            pos = end + len(END)
            continue
        raw = text[body_start:]
        overlap = _tag_overlap(raw, END)
        body = (raw[:-overlap] if overlap else raw).strip()
        regions.append((body, bool(body) and _is_json(body)))
        break
    return regions


def _arguments_text(body: str, complete: bool) -> str | None:
    match = _ARGUMENTS.search(body)
    if not match:
        return None
    raw = body[match.end() :]
    if complete:
        raw = raw.rstrip()
        if raw.endswith("}"):
            raw = raw[:-1].rstrip()
    return raw


@dataclass
class StreamingToolParser:
    """Turns the growing text of a streamed response into content and tool-call deltas."""

    sent_content: int = 0
    names: list[str | None] = field(default_factory=list)
    sent_arguments: list[str] = field(default_factory=list)

    def _content(self, text: str) -> str | None:
        limit = text.index(START) if START in text else len(text) - _tag_overlap(text, START)
        if limit > self.sent_content:
            piece, self.sent_content = text[self.sent_content : limit], limit
            return piece
        return None

    def delta(self, text: str) -> dict[str, Any]:
        """The chunk delta for the response text so far (``{}`` when nothing new can be sent)."""
        content = self._content(text)
        calls: list[dict[str, Any]] = []
        for i, (body, complete) in enumerate(_call_regions(text)):
            if i >= len(self.names):
                self.names.append(None)
                self.sent_arguments.append("")
            if self.names[i] is None:
                match = _NAME.search(body)
                if not match:
                    break
                self.names[i] = match.group(1)
                function = {"name": match.group(1)}
                calls.append({"id": tool_call_id(), "type": "function", "index": i, "function": function})
            arguments = _arguments_text(body, complete)
            if arguments is not None and len(arguments) > len(self.sent_arguments[i]):
                piece = arguments[len(self.sent_arguments[i]) :]
                self.sent_arguments[i] = arguments
                calls.append({"index": i, "function": {"arguments": piece}})
        if calls:
            return {"content": content, "tool_calls": calls}
        return {"content": content} if content else {}

    @property
    def called(self) -> bool:
        """Whether a tool call has started streaming."""
        return any(name is not None for name in self.names)


def arguments_as_objects(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Assistant tool-call arguments as dicts (what tool-aware chat templates expect), as vLLM renders them.

    A JSON string is parsed; empty, malformed or non-object arguments become ``{}``;
    an empty ``tool_calls`` list is dropped.
    """
    out = []
    for message in messages:
        calls = message.get("tool_calls")
        if message.get("role") != "assistant" or not isinstance(calls, list):
            out.append(message)
            continue
        message = {k: v for k, v in message.items() if k != "tool_calls"}
        if calls:
            message["tool_calls"] = [_with_object_arguments(call) for call in calls]
        out.append(message)
    return out


def _with_object_arguments(call: Any) -> Any:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return call
    arguments = call["function"].get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments else {}
        except ValueError:
            arguments = {}
    if not isinstance(arguments, dict):
        arguments = {}
    return {**call, "function": {**call["function"], "arguments": arguments}}
