"""OTLP/JSON trace files and export requests as conversations: the GenAI semantic conventions,
older flattened attributes and events, OpenInference, and hostile spans as BadRecords."""

from __future__ import annotations

import json

from tracebank.collect.conversation import BadRecord, Conversation
from tracebank.collect.formats import otlp

TRACE = "5b8efff798038103d269b633813fc60c"
TOOL = {"type": "function", "name": "add", "description": "Add", "parameters": {"type": "object"}}


def _attr(key, value):
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    return {"key": key, "value": {"stringValue": value}}


def _span(span_id, start, attrs, events=(), trace=TRACE):
    return {
        "traceId": trace, "spanId": span_id, "name": "chat", "startTimeUnixNano": str(start),
        "attributes": [_attr(k, v) for k, v in attrs.items()], "events": list(events),
    }  # fmt: skip


def _request(*spans):
    return {"resourceSpans": [{"scopeSpans": [{"spans": list(spans)}]}]}


def _semconv_span(span_id, start, **more):
    inputs = [
        {"role": "user", "parts": [{"type": "text", "content": "2+2?"}]},
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "c1", "name": "add", "arguments": {"a": 2}}],
        },
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "4"}]},
    ]
    outputs = [{"role": "assistant", "parts": [{"type": "text", "content": "4"}], "finish_reason": "stop"}]
    attrs = {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
        "gen_ai.system_instructions": json.dumps([{"type": "text", "content": "Be brief."}]),
        "gen_ai.input.messages": json.dumps(inputs), "gen_ai.output.messages": json.dumps(outputs),
        "gen_ai.tool.definitions": json.dumps([TOOL]),
        "gen_ai.usage.input_tokens": 12, "gen_ai.usage.output_tokens": 1, **more,
    }  # fmt: skip
    return _span(span_id, start, attrs)


def _parse(tmp_path, *requests, pretty=False):
    path = tmp_path / "traces.json"
    if pretty:
        path.write_text(json.dumps(requests[0], indent=2))
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in requests))
    return list(otlp.parse(path))


def test_semconv_spans_of_a_trace_are_one_conversation_in_start_order(tmp_path):
    agent = _span("00000000000000aa", 1, {"tracebank.reward": 0.75})
    later = _semconv_span("00000000000000b2", 3_000_000_000)
    earlier = _semconv_span("00000000000000b1", 2_000_000_000)
    [conv] = _parse(tmp_path, _request(agent, later), _request(earlier))
    assert isinstance(conv, Conversation) and conv.rollout_id == TRACE and conv.reward == 0.75
    assert [c.timestamp for c in conv.calls] == [2.0, 3.0]
    call = conv.calls[0]
    assert call.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "4"},
    ]  # fmt: skip
    assert call.output == {"role": "assistant", "content": "4"} and call.finish_reason == "stop"
    function = {k: TOOL[k] for k in ("name", "description", "parameters")}
    assert call.tools == [{"type": "function", "function": function}]
    assert call.usage == {"prompt_tokens": 12, "completion_tokens": 1} and call.model == "m"


def test_a_pretty_printed_document_is_read_whole(tmp_path):
    [conv] = _parse(tmp_path, _request(_semconv_span("00000000000000b1", 1)), pretty=True)
    assert isinstance(conv, Conversation) and len(conv.calls) == 1
    assert otlp.sniff(json.dumps(_request()).encode()) and not otlp.sniff(b'{"messages": []}')


def test_older_flattened_attributes_and_openinference(tmp_path):
    old = _span("00000000000000c1", 1, {
        "gen_ai.system": "openai", "gen_ai.request.model": "gpt",
        "gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "hi",
        "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": "hello",
        "gen_ai.completion.0.finish_reason": "stop",
    }, trace="1" * 32)  # fmt: skip
    phoenix = _span("00000000000000c2", 1, {
        "openinference.span.kind": "LLM", "llm.model_name": "qwen",
        "llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": "weather?",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.tool_calls.0.tool_call.id": "t1",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "weather",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"city": "Oslo"}',
        "llm.tools.0.tool.json_schema": json.dumps({"type": "function", "function": {"name": "weather"}}),
    }, trace="2" * 32)  # fmt: skip
    old_conv, phoenix_conv = _parse(tmp_path, _request(old, phoenix))
    assert old_conv.calls[0].messages == [{"role": "user", "content": "hi"}]
    assert old_conv.calls[0].output == {"role": "assistant", "content": "hello"}
    call = phoenix_conv.calls[0]
    assert call.model == "qwen" and call.tools == [{"type": "function", "function": {"name": "weather"}}]
    assert call.output["tool_calls"][0]["function"] == {"name": "weather", "arguments": '{"city": "Oslo"}'}


def test_per_message_span_events(tmp_path):
    events = [
        {"name": "gen_ai.user.message",
         "attributes": [_attr("gen_ai.event.content", json.dumps({"content": "q"}))]},
        {"name": "gen_ai.choice", "attributes": [
            _attr("gen_ai.event.content", json.dumps({"message": {"role": "assistant", "content": "a"}}))]},
    ]  # fmt: skip
    span = _span("00000000000000d1", 1, {"gen_ai.operation.name": "chat"}, events)
    [conv] = _parse(tmp_path, _request(span))
    assert conv.calls[0].messages == [{"role": "user", "content": "q"}]
    assert conv.calls[0].output == {"role": "assistant", "content": "a"}


def test_hostile_spans_are_bad_records_and_the_rest_is_kept(tmp_path):
    good = _semconv_span("00000000000000e1", 1)
    not_json = _semconv_span("00000000000000e2", 2, **{"gen_ai.input.messages": "{not json"})
    wrong_type = _semconv_span("00000000000000e3", 3, **{"gen_ai.output.messages": json.dumps({"role": 1})})
    deep = _semconv_span("00000000000000e4", 4, **{"gen_ai.input.messages": "[" * 5000 + "]" * 5000})
    parts_not_list = json.dumps([{"role": "user", "parts": 3}])
    bad_parts = _semconv_span("00000000000000e5", 5, **{"gen_ai.input.messages": parts_not_list})
    no_content = _span("00000000000000e6", 6, {"gen_ai.operation.name": "chat"})
    bad_id = dict(good, spanId=["x"])
    bad_attr = dict(good, attributes=[{"key": "a", "value": {"intValue": "x"}}])
    path = tmp_path / "traces.jsonl"
    spans = [good, not_json, wrong_type, deep, bad_parts, no_content, bad_id, bad_attr]
    lines = [_request(*spans), [1], {"resourceSpans": 3}]
    path.write_text("\n".join(json.dumps(r) for r in lines) + "\n{truncated\n" + "[" * 10000 + "\n")
    out = list(otlp.parse(path))
    convs = [o for o in out if isinstance(o, Conversation)]
    bad = [o for o in out if isinstance(o, BadRecord)]
    assert len(convs) == 1 and len(convs[0].calls) == 1
    assert len(bad) == 11, [b.line() for b in bad]
    assert all(b.line().count("\n") == 0 for b in bad)


def test_a_request_as_protobuf_bytes_gives_the_same_conversation():
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = _request(_semconv_span("00000000000000f1", 1_500_000_000))
    as_json = list(otlp.request_conversations(request))
    # proto3's JSON mapping writes ids in base64: turn the hex ids into that to build the message
    import base64

    for span in request["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        for key in ("traceId", "spanId"):
            span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    data = ParseDict(request, ExportTraceServiceRequest()).SerializeToString()
    assert list(otlp.request_conversations(data)) == as_json
    [bad] = list(otlp.request_conversations(b"\xff\xff\xff garbage"))
    assert isinstance(bad, BadRecord) and "protobuf" in bad.reason
