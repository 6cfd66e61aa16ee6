"""OpenTelemetry traces (OTLP export requests) of LLM calls, as conversations.

Input: OTLP/JSON ``ExportTraceServiceRequest`` objects
(``{"resourceSpans": [{"scopeSpans": [{"spans": [...]}]}]}``), one per line (what the
collector's file exporter writes) or one whole document; the receiver hands protobuf bodies
to :func:`request_spans` too. Which span attributes hold the chat is
:mod:`~tracebank.collect.formats.otlp_messages`'s business.

Grouping: every LLM span of one trace is one :class:`Conversation` whose ``rollout_id`` is the
trace id (hex), its calls ordered by start time. A trace's reward is a numeric span attribute
``tracebank.reward`` or ``agentlightning.reward`` on any span of the trace (the latest span's
when several carry one). A span that cannot be read is one BadRecord (``trace T span S``); the
trace's other calls are kept.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracebank.collect.conversation import BadRecord, Conversation
from tracebank.collect.formats import lines
from tracebank.collect.formats.otlp_messages import SpanError, is_llm_span, span_call

NAME = "otlp"
REWARD_ATTRIBUTES = ("tracebank.reward", "agentlightning.reward")
"""Span attributes whose number is the trace's reward."""
MAX_SPANS = 1_000_000
"""Spans one request may hold; past it the request is one BadRecord."""


@dataclass(frozen=True)
class Span:
    """What tracebank reads of one span."""

    trace_id: str
    span_id: str
    start: float
    """Start time, seconds since the epoch."""
    attrs: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]


def sniff(head: bytes) -> bool:
    """An OTLP/JSON file starts with an object whose first key is ``resourceSpans``."""
    return head.lstrip()[:40].replace(b" ", b"").startswith(b'{"resourceSpans"')


def _hex_id(value: Any) -> str:
    """A trace or span id: OTLP/JSON writes hex; proto3 JSON mapping (some SDKs) writes base64."""
    if not isinstance(value, str) or not value or len(value) > 64:
        raise SpanError("a span without a valid id")
    try:
        int(value, 16)
        return value.lower()
    except ValueError:
        pass
    try:
        return base64.b64decode(value, validate=True).hex()
    except (binascii.Error, ValueError):
        raise SpanError("a span id that is neither hex nor base64") from None


def _json_value(value: Any) -> Any:
    """An OTLP/JSON ``AnyValue`` as a plain value."""
    if not isinstance(value, dict):
        raise SpanError("an attribute value that is not an AnyValue object")
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        try:
            return int(value["intValue"])
        except (TypeError, ValueError):
            raise SpanError("an intValue that is not an integer") from None
    if "arrayValue" in value:
        items = (value["arrayValue"] or {}).get("values", [])
        return [_json_value(v) for v in _items(items)]
    if "kvlistValue" in value:
        return _json_attrs((value["kvlistValue"] or {}).get("values", []))
    return None


def _items(value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise SpanError("a list field that is not a list")
    return value


def _json_attrs(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in _items(items):
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            raise SpanError("an attribute without a key")
        out[item["key"]] = _json_value(item.get("value"))
    return out


def _nanos(value: Any) -> float:
    try:
        seconds = int(value or 0) / 1e9
    except (TypeError, ValueError):
        raise SpanError("a time that is not a number") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise SpanError("a time out of range")
    return seconds


def _json_span(span: Any) -> Span:
    if not isinstance(span, dict):
        raise SpanError("a span that is not an object")
    events = []
    for event in _items(span.get("events")):
        if not isinstance(event, dict):
            raise SpanError("an event that is not an object")
        events.append((str(event.get("name", "")), _json_attrs(event.get("attributes"))))
    return Span(
        _hex_id(span.get("traceId")),
        _hex_id(span.get("spanId")),
        _nanos(span.get("startTimeUnixNano")),
        _json_attrs(span.get("attributes")),
        events,
    )


def _json_spans(request: dict[str, Any], where: str) -> Iterator[Span | BadRecord]:
    count = 0
    for resource in _items(request.get("resourceSpans")):
        scopes = resource.get("scopeSpans") if isinstance(resource, dict) else None
        for scope in _items(scopes):
            for span in _items(scope.get("spans") if isinstance(scope, dict) else None):
                count += 1
                if count > MAX_SPANS:
                    raise SpanError(f"more than {MAX_SPANS} spans in one request")
                try:
                    yield _json_span(span)
                except SpanError as exc:
                    yield BadRecord(f"{where} span {count}", str(exc))


def _proto_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_proto_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return _proto_attrs(value.kvlist_value.values)
    if kind == "bytes_value":
        return None
    return getattr(value, kind) if kind else None


def _proto_attrs(items: Iterable[Any]) -> dict[str, Any]:
    return {item.key: _proto_value(item.value) for item in items}


def _proto_spans(data: bytes) -> list[Span]:
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    try:
        request = ExportTraceServiceRequest.FromString(data)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise SpanError(f"not an OTLP protobuf ExportTraceServiceRequest ({str(exc)[:80]})") from None
    out = []
    for resource in request.resource_spans:
        for scope in resource.scope_spans:
            for span in scope.spans:
                if len(span.trace_id) != 16 or len(span.span_id) != 8:
                    raise SpanError("a span without a valid id")
                events = [(e.name, _proto_attrs(e.attributes)) for e in span.events]
                attrs = _proto_attrs(span.attributes)
                start = span.start_time_unix_nano / 1e9
                out.append(Span(span.trace_id.hex(), span.span_id.hex(), start, attrs, events))
    return out


def request_spans(request: dict[str, Any] | bytes, where: str = "request") -> list[Span | BadRecord]:
    """The spans of one decoded ExportTraceServiceRequest: an OTLP/JSON object, or protobuf bytes.

    Raises SpanError when the request as a whole cannot be read (bad protobuf, wrong shape);
    a single unreadable span is a BadRecord in the list.
    """
    if isinstance(request, bytes):
        return list(_proto_spans(request))
    if not isinstance(request, dict):
        raise SpanError("not an OTLP/JSON object")
    return list(_json_spans(request, where))


def _reward(spans: list[Span]) -> float | None:
    reward = None
    for span in sorted(spans, key=lambda s: s.start):
        for name in REWARD_ATTRIBUTES:
            value = span.attrs.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                reward = float(value)
    return reward


def trace_conversation(trace_id: str, spans: list[Span]) -> Iterator[Conversation | BadRecord]:
    """One trace's LLM spans as one conversation (none when it has no readable LLM span)."""
    calls = []
    for span in sorted(spans, key=lambda s: (s.start, s.span_id)):
        if not is_llm_span(span.attrs):
            continue
        try:
            calls.append(span_call(span.attrs, span.events, span.start))
        except (SpanError, RecursionError) as exc:
            yield BadRecord(f"trace {trace_id} span {span.span_id}", str(exc)[:200])
    if calls:
        yield Conversation(trace_id, calls, NAME, reward=_reward(spans), metadata={"trace_id": trace_id})


def conversations(spans: Iterable[Span | BadRecord]) -> Iterator[Conversation | BadRecord]:
    """Spans (of any number of requests) grouped by trace into conversations, in first-seen order."""
    traces: dict[str, list[Span]] = {}
    for span in spans:
        if isinstance(span, BadRecord):
            yield span
        else:
            traces.setdefault(span.trace_id, []).append(span)
    for trace_id, members in traces.items():
        yield from trace_conversation(trace_id, members)


def request_conversations(request: dict[str, Any] | bytes) -> Iterator[Conversation | BadRecord]:
    """One decoded ExportTraceServiceRequest's conversations (JSON object or protobuf bytes)."""
    try:
        spans = request_spans(request)
    except SpanError as exc:
        yield BadRecord("request", str(exc))
        return
    yield from conversations(spans)


def _file_spans(path: Path) -> Iterator[Span | BadRecord]:
    document = _is_document(path)
    records: Iterable[tuple[str, Any] | BadRecord]
    if document:
        value = lines.json_document(path)
        records = [value] if isinstance(value, BadRecord) else [(path.name, value)]
    else:
        records = lines.json_lines(path)
    for record in records:
        if isinstance(record, BadRecord):
            yield record
            continue
        where, request = record
        try:
            yield from request_spans(request, where)
        except SpanError as exc:
            yield BadRecord(where, str(exc))


def _is_document(path: Path) -> bool:
    """A pretty-printed document: more than one line, the first not a whole JSON value (a file of
    one line, however long, is read as JSON lines, which bounds it the same way)."""
    first, newline, _ = lines.head(path).partition(b"\n")
    if not newline:
        return False
    try:
        json.loads(first)
    except ValueError:
        return True
    return False


def parse(path: Path) -> Iterator[Conversation | BadRecord]:
    """The file's traces as conversations.

    A trace's spans are grouped across the whole file, so the file's traces are held (as spans,
    without their other fields) until its end: memory grows with the LLM spans, not the lines.
    """
    yield from conversations(_file_spans(path))
