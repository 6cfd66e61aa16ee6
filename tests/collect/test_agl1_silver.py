"""Silver from 1.0 events: the columns 0.3 has, plus what 1.0 records with each call and reward."""

from __future__ import annotations

import json

from tracebank.collect.agl1_bronze import bronze_tables
from tracebank.collect.agl1_silver import message_rows, silver_from_events
from tracebank.collect.agl1_spool import read_spool
from tracebank.collect.redact import REDACTED, Redactor
from tracebank.warehouse import schemas

from tests.fixtures.agl1_server import ROUND_PROMPTS


def test_silver_tables_of_a_real_round(agl1_round):
    spool, result, _ = agl1_round
    bronze = bronze_tables(read_spool(spool), "c1", Redactor())
    silver = silver_from_events(bronze["events"], bronze["rollouts"], "c1")
    calls = silver["llm_calls"]
    assert calls.schema.names[: len(schemas.LLM_CALLS)] == schemas.LLM_CALLS.names
    n_calls = sum(e["event_type"] == "model_request" for c in result["completed"] for e in c["events"])
    assert calls.num_rows == n_calls
    rows = calls.to_pylist()
    gateway = [r for r in rows if r["model_version"] == 0]  # the real gateway calls (synthetic ones say 3)
    assert len(gateway) == 2 * sum(not p.startswith("scenario:") for p in ROUND_PROMPTS)
    for r in gateway:
        assert r["source"] == "agl1" and r["status"] == "ok" and r["http_status"] == 200
        assert (
            r["prompt_len"] == r["prompt_tokens"] > 0 and 0 < r["response_len"] == r["completion_tokens"] <= 6
        )
        assert r["finish_reason"] in ("length", "stop") and r["latency_ms"] > 0 and r["retry_count"] == 0
        assert r["is_train"] is True and r["reject_reason"] is None
    logprobs = [r["response_logprobs"] for r in rows if r["response_logprobs"]]
    assert [-0.5, -0.25] in logprobs and [-1.0] in logprobs
    reasons = {r["reject_reason"] for r in rows}
    assert {"error_status", "http_error", "no_response_ids", None} <= reasons

    rewards = silver["rewards"].to_pylist()
    assert len(rewards) == sum(e["event_type"] == "reward" for c in result["completed"] for e in c["events"])
    assert {r["value"] for r in rewards if r["reason"] == "bool_reward"} == {None}  # True is not a number
    assert {r["reported_by"] for r in rewards} == {"agent"}

    messages = silver["messages"].to_pylist()
    first = [m for m in messages if m["content"] == "What is 2 + 2?"]
    assert first and first[0]["role"] == "user" and first[0]["direction"] == "input"
    assert any(m["direction"] == "output" and m["role"] == "assistant" for m in messages)


def test_bronze_keeps_event_json_whole_but_redacts_credentials(agl1_round):
    spool, _, _ = agl1_round
    entry = read_spool(spool)[0]
    entry.data["events_by_attempt"][entry.key[1]].append(
        {
            "event_type": "tool",
            "timestamp": 1.0,
            "data": {"headers": {"Authorization": "Bearer sk-abcdefgh12345678"}},
        }
    )
    plain = bronze_tables([entry], "c1", None)["events"].to_pylist()
    redacted = bronze_tables([entry], "c1", Redactor())["events"].to_pylist()
    assert [json.loads(r["data"]) for r in plain[:-1]] == [e["data"] for e in entry.events()[:-1]]
    assert [r["position"] for r in plain] == list(range(len(plain)))
    assert json.loads(redacted[-1]["data"]) == {"headers": {"Authorization": REDACTED}}
    assert redacted[:-1] == plain[:-1]


def test_tool_calls_results_and_tools_fill_the_same_columns_as_03():
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    call = [{"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2}'}}]
    data = {
        "request": {
            "tools": tools,
            "messages": [
                {"role": "user", "content": "2 + 2?"},
                {"role": "assistant", "content": None, "tool_calls": call},
                {"role": "tool", "tool_call_id": "call_1", "content": "4"},
            ],
        },
        "response": {"choices": [{"message": {"role": "assistant", "content": "4", "tool_calls": []}}]},
    }
    rows = message_rows(data)
    assert [(r["role"], r["tool_calls"], r["tool_call_id"]) for r in rows] == [
        ("user", None, None),
        ("assistant", json.dumps(call), None),
        ("tool", None, "call_1"),
        ("assistant", None, None),
    ]
    assert {r["tools"] for r in rows} == {json.dumps(tools)}
