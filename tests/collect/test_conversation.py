"""The shared shape of text and log sources: a conversation is a valid 1.0 spool entry."""

from __future__ import annotations

import json

from tracebank.collect.agl1_bronze import bronze_tables
from tracebank.collect.agl1_check import entry_problem
from tracebank.collect.agl1_silver import silver_from_events
from tracebank.collect.agl1_spool import SpoolEntry
from tracebank.collect.conversation import Call, Conversation, content_id, spool_entry

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]


def _conversation(**more):
    call = Call(
        messages=[{"role": "user", "content": "2+2?"}],
        output={"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "add", "arguments": "{\"a\": 2, \"b\": 2}"}}]},
        tools=TOOLS,
        timestamp=1.0,
        **more,
    )  # fmt: skip
    return Conversation("conv-1", [call], "chat", reward=0.5, task={"q": "2+2?"})


def test_a_conversation_is_a_spool_entry_whose_silver_keeps_messages_tools_and_reward():
    entry = spool_entry(_conversation())
    assert entry_problem(json.loads(json.dumps(entry))) is None
    tables = bronze_tables([SpoolEntry(None, entry)], "c1", None)  # type: ignore[arg-type]
    silver = silver_from_events(tables["events"], tables["rollouts"], "c1")
    calls = silver["llm_calls"].to_pylist()
    assert (
        len(calls) == 1
        and calls[0]["prompt_token_ids"] == []
        and calls[0]["reject_reason"] == "no_prompt_ids"
        and calls[0]["token_source"] == "text"
    )
    messages = silver["messages"].to_pylist()
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert json.loads(messages[1]["tool_calls"])[0]["function"]["name"] == "add"
    assert json.loads(messages[0]["tools"]) == TOOLS
    assert silver["rewards"].column("value").to_pylist() == [0.5]


def test_engine_ids_reach_the_calls_as_they_are():
    entry = spool_entry(
        _conversation(prompt_token_ids=[1, 2, 3], response_token_ids=[4, 5], logprobs=[-0.1, -0.2])
    )
    tables = bronze_tables([SpoolEntry(None, entry)], "c1", None)  # type: ignore[arg-type]
    call = silver_from_events(tables["events"], tables["rollouts"], "c1")["llm_calls"].to_pylist()[0]
    assert (call["prompt_token_ids"], call["response_token_ids"]) == ([1, 2, 3], [4, 5])
    assert call["response_logprobs"] == [-0.1, -0.2] and call["reject_reason"] is None
    assert call["token_source"] == "engine"


def test_content_id_is_canonical():
    assert content_id({"b": 1, "a": [1, "é"]}) == content_id({"a": [1, "é"], "b": 1})
    assert content_id({"a": 1}) != content_id({"a": 2})
    assert content_id({"a": 1}).startswith("sha256:") and len(content_id({})) == 7 + 32
