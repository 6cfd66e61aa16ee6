"""The silver `messages` table: tool calls, tool results and the request's tools, as columns.

LiteLLM 1.108 keeps OpenAI's ``tool_calls`` / ``tool_call_id`` beside the GenAI text parts
and flattens the request's tools into ``llm.request.functions.N.*``; other emitters use the
GenAI conventions' ``tool_call`` / ``tool_call_response`` parts. Both land in the same columns.
"""

from __future__ import annotations

import json

from tracebank.collect import build_silver
from tracebank.warehouse.query import run_sql

from tests.fixtures.bronze import commit_collection
from tests.fixtures.proxy_spans import Call, call_spans

CALL = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}


def _spans(inputs, outputs, extra=None):
    out = []
    for span in call_spans("ro-1", "at-1", 1, Call(prompt_ids=[1, 2], response_ids=[3]), 1_700_000_000.0):
        if span.name == "litellm_request":
            attrs = {
                **span.attributes,
                "gen_ai.input.messages": json.dumps(inputs),
                "gen_ai.output.messages": json.dumps(outputs),
                **(extra or {}),
            }
            span = span.model_copy(update={"attributes": attrs})
        out.append(span)
    return out


def _messages(wh):
    build_silver(wh)
    sql = (
        "SELECT direction, role, content, tool_calls, tool_call_id, tools FROM messages "
        "ORDER BY direction, message_index"
    )
    return run_sql(wh, sql).to_pylist()


def test_litellm_openai_fields_and_flattened_tools(wh):
    inputs = [
        {"role": "user", "parts": [{"type": "text", "content": "1+2?"}]},
        {"role": "assistant", "parts": [], "tool_calls": [CALL]},
        {"role": "tool", "parts": [{"type": "text", "content": "3"}], "tool_call_id": "c1"},
    ]
    outputs = [{"role": "assistant", "parts": [{"type": "text", "content": "3"}], "finish_reason": "stop"}]
    tools = {
        "llm.request.functions.0.name": "add",
        "llm.request.functions.0.description": "Add two numbers",
        "llm.request.functions.0.parameters": json.dumps({"type": "object"}),
    }
    commit_collection(wh, _spans(inputs, outputs, tools))
    rows = _messages(wh)
    expected_tools = [
        {
            "type": "function",
            "function": {"name": "add", "description": "Add two numbers", "parameters": {"type": "object"}},
        }
    ]
    assert [json.loads(r.pop("tools")) for r in rows] == [expected_tools] * 4
    assert rows == [
        {"direction": "input", "role": "user", "content": "1+2?", "tool_calls": None, "tool_call_id": None},
        {
            "direction": "input",
            "role": "assistant",
            "content": None,
            "tool_calls": json.dumps([CALL], separators=(",", ":")),
            "tool_call_id": None,
        },
        {"direction": "input", "role": "tool", "content": "3", "tool_calls": None, "tool_call_id": "c1"},
        {
            "direction": "output",
            "role": "assistant",
            "content": "3",
            "tool_calls": None,
            "tool_call_id": None,
        },
    ]


def test_genai_tool_call_parts(wh):
    inputs = [
        {"role": "user", "parts": [{"type": "text", "content": "1+2?"}]},
        {
            "role": "assistant",
            "parts": [
                {"type": "text", "content": "Let me add."},
                {"type": "tool_call", "id": "c1", "name": "add", "arguments": {"a": 1, "b": 2}},
            ],
        },
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": {"sum": 3}}]},
    ]
    commit_collection(wh, _spans(inputs, []))
    rows = _messages(wh)
    assert [r["tools"] for r in rows] == [None] * 3
    assert rows[1]["content"] == "Let me add."
    assert json.loads(rows[1]["tool_calls"]) == [
        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a":1,"b":2}'}}
    ]
    assert (rows[2]["content"], rows[2]["tool_call_id"]) == ('{"sum":3}', "c1")
