"""One LLM span's attributes as a :class:`~tracebank.collect.conversation.Call` (OpenAI-format messages).

Three conventions write chat content into spans; each is read here and nothing else:

- OpenTelemetry GenAI semantic conventions (development): ``gen_ai.input.messages``,
  ``gen_ai.output.messages``, ``gen_ai.system_instructions``, ``gen_ai.tool.definitions``
  (JSON strings or structured values; messages are ``{role, parts: [...]}`` with parts of type
  ``text``, ``tool_call`` and ``tool_call_response``);
- older GenAI SDKs: flattened ``gen_ai.prompt.N.role`` / ``.content`` and
  ``gen_ai.completion.N.*`` attributes, or one span event per message (``gen_ai.user.message``,
  ``gen_ai.choice``...);
- OpenInference (Phoenix): ``llm.input_messages.N.message.*``, ``llm.output_messages.N.message.*``,
  ``llm.tools.N.tool.json_schema``.

Anything of the wrong type raises :class:`SpanError` (the caller turns it into a BadRecord).
"""

from __future__ import annotations

import json
import re
from typing import Any

from tracebank.collect.agl1_check import MAX_DEPTH, nesting_depth
from tracebank.collect.conversation import Call

GENAI_CHAT_OPERATIONS = ("chat", "text_completion", "generate_content")
"""``gen_ai.operation.name`` values that are one chat call."""
_ROLES = ("system", "developer", "user", "assistant", "tool")


class SpanError(ValueError):
    """A span whose chat content cannot be read (the reason, one line)."""


def is_llm_span(attrs: dict[str, Any]) -> bool:
    """Whether a span's attributes record one chat call in any of the three conventions."""
    if attrs.get("gen_ai.operation.name") in GENAI_CHAT_OPERATIONS:
        return True
    if "gen_ai.input.messages" in attrs or "gen_ai.output.messages" in attrs:
        return True
    if attrs.get("openinference.span.kind") == "LLM":
        return True
    return any(k.startswith(("gen_ai.prompt.", "llm.input_messages.")) for k in attrs)


def _json(value: Any, name: str) -> Any:
    """A structured attribute as it is, a JSON-string one parsed (bounded in depth)."""
    if not isinstance(value, str):
        return value
    try:
        parsed = json.loads(value)
    except RecursionError:
        raise SpanError(f"{name} is nested too deeply") from None
    except ValueError:
        raise SpanError(f"{name} is not JSON") from None
    if nesting_depth(parsed) > MAX_DEPTH:
        raise SpanError(f"{name} is nested deeper than {MAX_DEPTH} levels")
    return parsed


def _list(value: Any, name: str) -> list[Any]:
    value = _json(value, name)
    if not isinstance(value, list):
        raise SpanError(f"{name} is not a list (a {type(value).__name__})")
    return value


def _text(value: Any, name: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (int, float, bool)):
        return str(value)
    raise SpanError(f"{name} is not text")


def _arguments(value: Any) -> str:
    """Tool-call arguments as OpenAI keeps them: a JSON string."""
    return value if isinstance(value, str) else json.dumps(value if value is not None else {})


def _tool_call(call_id: Any, name: Any, arguments: Any, where: str) -> dict[str, Any]:
    if not isinstance(name, str) or not name:
        raise SpanError(f"{where}: a tool call without a name")
    function = {"name": name, "arguments": _arguments(arguments)}
    return {"id": _text(call_id, where), "type": "function", "function": function}


def _semconv_message(message: Any, where: str) -> list[dict[str, Any]]:
    """One semconv message as OpenAI messages (each tool_call_response part is a ``tool`` message)."""
    if not isinstance(message, dict):
        raise SpanError(f"{where} is not an object")
    role = message.get("role")
    if role not in _ROLES:
        raise SpanError(f"{where} has no known role")
    parts = message.get("parts", [])
    if not isinstance(parts, list):
        raise SpanError(f"{where}.parts is not a list")
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    for part in parts:
        if not isinstance(part, dict):
            raise SpanError(f"{where} has a part that is not an object")
        kind = part.get("type")
        if kind == "text":
            texts.append(_text(part.get("content"), where))
        elif kind == "tool_call":
            calls.append(_tool_call(part.get("id"), part.get("name"), part.get("arguments"), where))
        elif kind == "tool_call_response":
            out.append(
                {"role": "tool", "tool_call_id": _text(part.get("id"), where),
                 "content": _text(part.get("response"), where)}
            )  # fmt: skip
        # other part types (blobs, reasoning...) carry nothing a chat template renders
    if texts or calls or not out:
        own: dict[str, Any] = {"role": role, "content": "".join(texts) if texts else None}
        if calls:
            own["tool_calls"] = calls
        if role != "assistant" and own["content"] is None:
            own["content"] = ""
        out.insert(0, own)
    return out


def _semconv(attrs: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any], str | None]:
    messages: list[dict[str, Any]] = []
    if "gen_ai.system_instructions" in attrs:
        parts = _list(attrs["gen_ai.system_instructions"], "gen_ai.system_instructions")
        text = "".join(
            _text(p.get("content"), "gen_ai.system_instructions") for p in parts if isinstance(p, dict)
        )
        messages.append({"role": "system", "content": text})
    for i, message in enumerate(_list(attrs.get("gen_ai.input.messages", "[]"), "gen_ai.input.messages")):
        messages.extend(_semconv_message(message, f"gen_ai.input.messages[{i}]"))
    outputs = _list(attrs.get("gen_ai.output.messages", "[]"), "gen_ai.output.messages")
    if not outputs:
        raise SpanError("no gen_ai.output.messages")
    first = outputs[0]
    output = _semconv_message(first, "gen_ai.output.messages[0]")[0]
    if output["role"] != "assistant":
        raise SpanError("gen_ai.output.messages[0] is not an assistant message")
    reason = first.get("finish_reason")
    return messages, output, reason if isinstance(reason, str) else None


def _numbered(attrs: dict[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    """``PREFIX.N.REST`` attributes grouped by N, each as ``{REST: value}``."""
    pattern = re.compile(re.escape(prefix) + r"\.(\d{1,6})\.(.+)")
    out: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        if match := pattern.fullmatch(key):
            out.setdefault(int(match.group(1)), {})[match.group(2)] = value
    return dict(sorted(out.items()))


def _flat_message(fields: dict[str, Any], where: str, prefix: str = "") -> dict[str, Any]:
    """A flattened message (``role``, ``content``, ``tool_calls.N.*``, ``tool_call_id``) as OpenAI's."""
    role = fields.get(f"{prefix}role")
    if role not in _ROLES:
        raise SpanError(f"{where} has no known role")
    message: dict[str, Any] = {"role": role, "content": _text(fields.get(f"{prefix}content"), where)}
    calls = _numbered(fields, f"{prefix}tool_calls")
    if calls:
        message["tool_calls"] = [
            _tool_call(
                c.get("id", c.get("tool_call.id")),
                c.get("name", c.get("tool_call.function.name")),
                c.get("arguments", c.get("tool_call.function.arguments")),
                where,
            )
            for c in calls.values()
        ]
        message["content"] = message["content"] or None
    if (tool_call_id := fields.get(f"{prefix}tool_call_id")) is not None:
        message["tool_call_id"] = _text(tool_call_id, where)
    return message


def _flattened(attrs: dict[str, Any], ins: str, outs: str, prefix: str) -> tuple[list[Any], dict[str, Any]]:
    messages = [_flat_message(f, f"{ins}.{n}", prefix) for n, f in _numbered(attrs, ins).items()]
    answers = list(_numbered(attrs, outs).items())
    if not answers:
        raise SpanError(f"no {outs}.0")
    fields = answers[0][1]
    fields.setdefault(f"{prefix}role", "assistant")
    output = _flat_message(fields, f"{outs}.{answers[0][0]}", prefix)
    if output["role"] != "assistant":
        raise SpanError(f"{outs}.0 is not an assistant message")
    return messages, output


_EVENT_ROLES = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}


def _event_message(attrs: dict[str, Any], role: str, where: str) -> dict[str, Any]:
    body = _json(attrs.get("gen_ai.event.content", attrs.get("body", {})), where)
    if not isinstance(body, dict):
        raise SpanError(f"{where} content is not an object")
    if role == "choice":
        body = body.get("message", body)
        if not isinstance(body, dict):
            raise SpanError(f"{where} message is not an object")
        role = "assistant"
    message: dict[str, Any] = {"role": body.get("role", role), "content": _text(body.get("content"), where)}
    if isinstance(body.get("tool_calls"), list):
        message["tool_calls"] = [
            _tool_call(c.get("id"), (c.get("function") or {}).get("name"),
                       (c.get("function") or {}).get("arguments"), where)
            for c in body["tool_calls"] if isinstance(c, dict)
        ]  # fmt: skip
        message["content"] = message["content"] or None
    if "id" in body and message["role"] == "tool":
        message["tool_call_id"] = _text(body["id"], where)
    return message


def _from_events(events: list[tuple[str, dict[str, Any]]]) -> tuple[list[Any], dict[str, Any]] | None:
    messages: list[dict[str, Any]] = []
    output = None
    for i, (name, attrs) in enumerate(events):
        if name in _EVENT_ROLES:
            messages.append(_event_message(attrs, _EVENT_ROLES[name], f"event {i} ({name})"))
        elif name == "gen_ai.choice" and output is None:
            output = _event_message(attrs, "choice", f"event {i} ({name})")
    return (messages, output) if output is not None else None


def _tools(attrs: dict[str, Any]) -> list[dict[str, Any]] | None:
    tools: list[dict[str, Any]] = []
    if "gen_ai.tool.definitions" in attrs:
        for tool in _list(attrs["gen_ai.tool.definitions"], "gen_ai.tool.definitions"):
            if not isinstance(tool, dict):
                raise SpanError("gen_ai.tool.definitions holds a non-object")
            if isinstance(tool.get("function"), dict):  # already OpenAI's shape
                tools.append(tool)
                continue
            function = {k: tool[k] for k in ("name", "description", "parameters") if k in tool}
            tools.append({"type": tool.get("type", "function"), "function": function})
    for n, fields in _numbered(attrs, "llm.tools").items():
        schema = _json(fields.get("tool.json_schema"), f"llm.tools.{n}.tool.json_schema")
        if not isinstance(schema, dict):
            raise SpanError(f"llm.tools.{n}.tool.json_schema is not an object")
        tools.append(schema if "function" in schema else {"type": "function", "function": schema})
    return tools or None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _usage(attrs: dict[str, Any]) -> dict[str, Any] | None:
    prompt = _int(attrs.get("gen_ai.usage.input_tokens", attrs.get("llm.token_count.prompt")))
    completion = _int(attrs.get("gen_ai.usage.output_tokens", attrs.get("llm.token_count.completion")))
    if prompt is None and completion is None:
        return None
    return {"prompt_tokens": prompt, "completion_tokens": completion}


def _model(attrs: dict[str, Any]) -> str | None:
    for key in ("gen_ai.response.model", "gen_ai.request.model", "llm.model_name"):
        if isinstance(attrs.get(key), str):
            return str(attrs[key])
    return None


def span_call(attrs: dict[str, Any], events: list[tuple[str, dict[str, Any]]], timestamp: float) -> Call:
    """The chat call one LLM span records; SpanError when its content is missing or malformed."""
    reason: str | None = None
    if "gen_ai.input.messages" in attrs or "gen_ai.output.messages" in attrs:
        messages, output, reason = _semconv(attrs)
    elif any(k.startswith("llm.output_messages.") for k in attrs):
        messages, output = _flattened(attrs, "llm.input_messages", "llm.output_messages", "message.")
    elif any(k.startswith("gen_ai.completion.") for k in attrs):
        messages, output = _flattened(attrs, "gen_ai.prompt", "gen_ai.completion", "")
        if isinstance(attrs.get("gen_ai.completion.0.finish_reason"), str):
            reason = attrs["gen_ai.completion.0.finish_reason"]
    elif (found := _from_events(events)) is not None:
        messages, output = found
    else:
        raise SpanError("an LLM span without its messages (content capture off?)")
    if reason is None and isinstance(attrs.get("gen_ai.response.finish_reasons"), list):
        reasons = attrs["gen_ai.response.finish_reasons"]
        reason = reasons[0] if reasons and isinstance(reasons[0], str) else None
    return Call(
        messages=messages,
        output=output,
        tools=_tools(attrs),
        model=_model(attrs),
        usage=_usage(attrs),
        finish_reason=reason,
        timestamp=timestamp,
    )
