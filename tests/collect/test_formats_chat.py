"""The chat format (seed 003's train.jsonl): one conversation per line, a call per assistant turn,
and every wrong type one BadRecord naming the line while the rest is kept."""

from __future__ import annotations

import json

import pytest
from tracebank.collect.conversation import BadRecord, Conversation, content_id
from tracebank.collect.formats import chat, parser

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
CALL = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 2}'}}
TURNS = [
    {"role": "system", "content": "You can add."},
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "4"},
    {"role": "assistant", "content": "4"},
]


def _parse(tmp_path, *lines: str) -> list[Conversation | BadRecord]:
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return list(parser("chat").parse(path))


def test_each_assistant_turn_is_a_call_with_everything_before_it_and_the_tools(tmp_path):
    record = {"messages": TURNS, "tools": TOOLS, "reward": 1}
    (conv,) = _parse(tmp_path, json.dumps(record))
    assert isinstance(conv, Conversation)
    assert conv.rollout_id == content_id(record) and conv.reward == 1.0 and conv.source == "chat"
    assert [len(c.messages) for c in conv.calls] == [2, 4]
    assert conv.calls[0].output == TURNS[2] and conv.calls[1].messages == TURNS[:4]
    assert all(c.tools == TOOLS for c in conv.calls)
    assert conv.metadata == {"record": "train.jsonl:1"}


def test_the_line_id_names_the_rollout_and_no_tools_is_none(tmp_path):
    (conv,) = _parse(tmp_path, json.dumps({"id": "run-7", "messages": TURNS[1:3], "tools": []}))
    assert isinstance(conv, Conversation)
    assert conv.rollout_id == "run-7" and conv.reward is None and conv.calls[0].tools is None


BAD = [
    ({"messages": "hi"}, "`messages` is missing or not a list"),
    ({"tools": TOOLS}, "`messages` is missing or not a list"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "message 0 has an unknown role 'robot'"),
    ({"messages": [{"role": "user", "content": 5}]}, "message 0 `content` is a int"),
    ({"messages": [{"role": "user", "content": [5]}]}, "message 0 `content` holds a part"),
    ({"messages": [{"role": "assistant", "tool_calls": {"a": 1}}]}, "`tool_calls` is not a list"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"function": {}}]}]}, "no `function.name`"),
    ({"messages": [{"role": "tool", "tool_call_id": 3}]}, "`tool_call_id` is not text"),
    ({"messages": [{"role": "user", "content": "x"}]}, "no assistant message"),
    ({"messages": TURNS, "tools": "add"}, "`tools` is not a list of objects"),
    ({"messages": TURNS, "reward": "1"}, "`reward` is not a number"),
    ({"messages": TURNS, "reward": True}, "`reward` is not a number"),
    ({"messages": TURNS, "reward": 1e300}, "`reward` is unusable (beyond_range)"),
    ({"messages": TURNS, "id": "a\nb"}, "`id` is not a printable string"),
    ({"messages": TURNS, "id": 7}, "`id` is not a printable string"),
    ({"messages": TURNS, "id": "x" * 201}, "`id` is not a printable string"),
]


@pytest.mark.parametrize(("record", "why"), BAD)
def test_a_wrong_type_is_one_bad_record_and_the_next_line_is_kept(tmp_path, record, why):
    bad, good = _parse(tmp_path, json.dumps(record), json.dumps({"messages": TURNS}))
    assert isinstance(bad, BadRecord) and bad.where == "train.jsonl:1" and why in bad.reason
    assert isinstance(good, Conversation)


def test_nan_and_infinity_anywhere_are_bad_records(tmp_path):
    lines = ['{"messages": [], "reward": NaN}', '{"messages": [], "x": {"y": -Infinity}}']
    assert [b.line() for b in _parse(tmp_path, *lines)] == [  # type: ignore[union-attr]
        "train.jsonl:1: `reward` is nan (not standard JSON)",
        "train.jsonl:2: `x.y` is -inf (not standard JSON)",
    ]


def test_sniff_takes_chat_lines_and_not_request_logs():
    assert chat.sniff(b'\n{"messages": [{"role": "user", "content": "x"}], "tools": []}\n{')
    assert chat.sniff(b'{"messages": [{"role": "user", "content": "' + b"x" * 100)  # cut long line
    assert not chat.sniff(b'{"request": {"messages": []}, "response": {}}\n')
    assert not chat.sniff(b'{"messages": [], "choices": []}\n')
    assert not chat.sniff(b"not json\n") and not chat.sniff(b"")
