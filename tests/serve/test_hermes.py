"""Hermes tool-call parsing, whole and streamed, and tool-call arguments in prompts (serve.hermes)."""

from __future__ import annotations

from tracebank.serve.hermes import StreamingToolParser, arguments_as_objects, parse_tool_calls

CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": "é"}}\n</tool_call>'


def test_text_without_a_tag_is_content():
    assert parse_tool_calls("just text") == ("just text", [])


def test_calls_are_parsed_and_content_is_the_text_before():
    content, calls = parse_tool_calls("Sure." + CALL + CALL.replace("add", "mul"))
    assert content == "Sure."
    assert [c["function"] for c in calls] == [
        {"name": "add", "arguments": '{"a": 1, "b": "é"}'},
        {"name": "mul", "arguments": '{"a": 1, "b": "é"}'},
    ]
    assert all(c["type"] == "function" and c["id"].startswith("chatcmpl-tool-") for c in calls)
    assert parse_tool_calls(CALL)[0] is None  # no text before the call: null content


def test_an_unclosed_call_at_the_end_still_parses_and_bad_json_stays_text():
    assert parse_tool_calls('<tool_call>{"name": "f", "arguments": {}}')[1][0]["function"]["name"] == "f"
    broken = '<tool_call>{"name": "f", "argu'
    assert parse_tool_calls(broken) == (broken, [])


def test_streaming_rebuilds_the_same_call_from_one_character_at_a_time():
    parser, text, content, name, arguments = StreamingToolParser(), "", "", "", ""
    for char in "Sure." + CALL:
        text += char
        delta = parser.delta(text)
        content += delta.get("content") or ""
        for call in delta.get("tool_calls", []):
            name += call["function"].get("name", "")
            arguments += call["function"].get("arguments", "")
    assert (content, name, arguments) == ("Sure.", "add", '{"a": 1, "b": "é"}')
    assert parser.called


def test_a_partial_tag_is_held_back_then_released_when_it_is_not_a_tag():
    parser = StreamingToolParser()
    assert parser.delta("Hi <tool") == {"content": "Hi "}
    assert parser.delta("Hi <tool") == {}
    assert parser.delta("Hi <tools!") == {"content": "<tools!"}


def test_prompt_arguments_become_objects_as_vllm_renders_them():
    messages = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": "", "tool_calls": []},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "f", "arguments": '{"a":1}'}},
                {"type": "function", "function": {"name": "g", "arguments": "not json"}},
                {"type": "function", "function": {"name": "h", "arguments": ""}},
            ],
        },
    ]
    out = arguments_as_objects(messages)
    assert out[0] == messages[0] and "tool_calls" not in out[1]
    assert [c["function"]["arguments"] for c in out[2]["tool_calls"]] == [{"a": 1}, {}, {}]
    assert messages[2]["tool_calls"][0]["function"]["arguments"] == '{"a":1}'  # input untouched
