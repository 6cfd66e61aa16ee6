"""``--format atif``: Harbor's ATIF trajectories (RFC 0001, v1.0 to v1.7) as token-faithful conversations."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tracebank.collect.conversation import BadRecord, Conversation, spool_entry
from tracebank.collect.formats import atif as fmt
from tracebank.collect.formats import lines

# The served ids of a real vLLM 0.32.0 tool call (tests/serve/record_vllm.py), so the trajectory's
# metrics carry ids an engine really produced.
VLLM = json.loads((Path(__file__).parents[1] / "serve" / "fixtures" / "vllm_responses.json").read_text())
SERVED = VLLM["responses"]["tool_call"]["body"]
TOOLS = VLLM["requests"]["tool_call"]["tools"]


def trajectory(session: str = "run-7f3a") -> dict[str, Any]:
    """An ATIF-v1.6 trajectory laid out as the RFC's schema tables say (root, AgentSchema with v1.5
    ``tool_definitions``, StepObject, ToolCallSchema, ObservationSchema, MetricsSchema with v1.3/v1.4 ids)."""
    return {
        "schema_version": "ATIF-v1.6",
        "session_id": session,
        "agent": {
            "name": "weather-agent",
            "version": "0.3.1",
            "model_name": "tiny",
            "tool_definitions": TOOLS,
        },
        "notes": "one tool call, then the answer",
        "extra": {"reward": 1.0},
        "final_metrics": {"total_prompt_tokens": 300, "total_completion_tokens": 80, "total_steps": 5},
        "steps": [
            {"step_id": 1, "source": "system", "message": "You are terse."},
            {
                "step_id": 2,
                "timestamp": "2026-11-30T09:15:00Z",
                "source": "user",
                "message": [{"type": "text", "text": "Weather in Paris?"}, {"type": "image", "source": {}}],
            },
            {
                "step_id": 3,
                "timestamp": "2026-11-30T09:15:02Z",
                "source": "agent",
                "message": "Checking.",
                "reasoning_content": "Need the weather tool.",
                "tool_calls": [
                    {"tool_call_id": "call_1", "function_name": "get_weather", "arguments": {"city": "Paris"}}
                ],
                "observation": {"results": [{"source_call_id": "call_1", "content": "18C, cloudy"}]},
                "metrics": {
                    "prompt_tokens": SERVED["usage"]["prompt_tokens"],
                    "completion_tokens": SERVED["usage"]["completion_tokens"],
                    "prompt_token_ids": SERVED["prompt_token_ids"],
                    "completion_token_ids": SERVED["choices"][0]["token_ids"],
                    "logprobs": [-0.5] * len(SERVED["choices"][0]["token_ids"]),
                },
                "extra": {"reward": 0.25},
            },
            {
                "step_id": 4,
                "timestamp": "2026-11-30T09:15:04",
                "source": "agent",
                "model_name": "tiny-2",
                "message": "18C and cloudy.",
                # the RFC's own worked example pairs 44 logprobs with 37 ids: kept ids, dropped logprobs
                "metrics": {"completion_token_ids": [5, 6, 7], "logprobs": [-0.1, -0.2]},
            },
            {"step_id": 5, "source": "agent", "message": "Anything else?"},
        ],
    }


def only(path: Path) -> Conversation:
    (one,) = fmt.parse(path)
    assert isinstance(one, Conversation), one
    return one


def test_each_agent_step_is_a_call_with_the_engines_ids_and_the_history_before_it(tmp_path):
    path = tmp_path / "trajectory.json"
    path.write_text(json.dumps(trajectory(), indent=2))
    assert fmt.sniff(lines.head(path))
    conversation = only(path)
    assert (conversation.rollout_id, conversation.source, conversation.reward) == ("run-7f3a", "atif", 1.0)
    assert conversation.task == [{"type": "text", "text": "Weather in Paris?"}]
    assert conversation.metadata == {
        "name": "weather-agent",
        "version": "0.3.1",
        "schema_version": "ATIF-v1.6",
        "parts_dropped": 1,
        "logprobs_dropped": 1,
    }
    tool, answer, last = conversation.calls
    assert tool.prompt_token_ids == SERVED["prompt_token_ids"]
    assert tool.response_token_ids == SERVED["choices"][0]["token_ids"] and tool.logprobs
    assert tool.tools == TOOLS and tool.model == "tiny" and tool.reward == 0.25
    assert tool.usage == {"prompt_tokens": SERVED["usage"]["prompt_tokens"], "completion_tokens": 76}
    assert (
        tool.timestamp == datetime(2026, 11, 30, 9, 15, 2, tzinfo=UTC).timestamp()
        and tool.finish_reason == "tool_calls"
    )
    assert [m["role"] for m in tool.messages] == ["system", "user"]
    assert tool.output == {
        "role": "assistant",
        "content": "Checking.",
        "reasoning_content": "Need the weather tool.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    }
    assert answer.messages[2:] == [
        tool.output,
        {"role": "tool", "tool_call_id": "call_1", "content": "18C, cloudy"},
    ]
    assert (answer.response_token_ids, answer.logprobs, answer.model) == ([5, 6, 7], None, "tiny-2")
    assert (
        answer.timestamp == datetime(2026, 11, 30, 9, 15, 4, tzinfo=UTC).timestamp()
        and answer.prompt_token_ids is None
    )
    assert last.messages[-1] == answer.output and last.response_token_ids is None and last.usage is None
    entry = spool_entry(conversation)  # the shape the collect path commits
    assert [e["event_type"] for e in entry["events_by_attempt"]["1"]] == ["model_request", "reward"] + [
        "model_request"
    ] * 2 + ["reward"]


def test_json_lines_of_trajectories_and_a_one_line_document_are_read(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(trajectory("a")) + "\n\n" + json.dumps(trajectory("b")) + "\n")
    assert [c.rollout_id for c in fmt.parse(path) if isinstance(c, Conversation)] == ["a", "b"]
    single = tmp_path / "one.json"
    single.write_text(json.dumps(trajectory("c")))
    assert only(single).rollout_id == "c"
    (tmp_path / "empty.json").write_text("\n")
    assert list(fmt.parse(tmp_path / "empty.json")) == []
    again = [c.rollout_id for c in fmt.parse(path) if isinstance(c, Conversation)]
    assert again == ["a", "b"]  # the same ids on re-import: the collect path adds nothing


def broken(change) -> dict[str, Any]:
    record = copy.deepcopy(trajectory())
    change(record)
    return record


STEP = 3  # the tool-calling agent step, 1-based


@pytest.mark.parametrize(
    "record, reason",
    [
        (broken(lambda r: r.pop("session_id")), "no session_id string"),
        (broken(lambda r: r.update(steps={"1": {}})), "steps is not a list of objects"),
        (broken(lambda r: r.update(agent="x")), "agent is not an object"),
        (broken(lambda r: r["agent"].update(tool_definitions="x")), "agent.tool_definitions is not a list"),
        (broken(lambda r: r.update(steps=r["steps"][:2])), "no agent step"),
        (broken(lambda r: r["steps"][0].update(source="robot")), "step 1: source is 'robot'"),
        (broken(lambda r: r["steps"][1].update(message=3)), "step 2: message is neither a string nor"),
        (broken(lambda r: r["steps"][2].update(tool_calls={})), "step 3: tool_calls is not a list"),
        (broken(lambda r: r["steps"][2]["tool_calls"][0].pop("function_name")), "step 3: a tool call lacks"),
        (broken(lambda r: r["steps"][2]["tool_calls"][0].update(arguments=[1])), "step 3: a tool call lacks"),
        (
            broken(lambda r: r["steps"][2].update(observation={"results": 1})),
            "observation.results is not a list",
        ),
        (broken(lambda r: r["steps"][2].update(metrics=[])), "step 3: metrics is not an object"),
        (
            broken(lambda r: r["steps"][2]["metrics"].update(prompt_token_ids=[1.5])),
            "prompt_token_ids is not a list",
        ),
        (
            broken(lambda r: r["steps"][2]["metrics"].update(completion_token_ids="1")),
            "completion_token_ids is not",
        ),
        (
            broken(lambda r: r["steps"][2]["metrics"].update(logprobs=["x"])),
            "logprobs is not a list of finite",
        ),
        (broken(lambda r: r["extra"].update(reward=float("nan"))), "NaN or Infinity"),
        ([trajectory()], "not a JSON object (a list)"),
    ],
)
def test_a_broken_trajectory_is_one_bad_record_and_the_next_is_read(tmp_path, record, reason):
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(record) + "\n" + json.dumps(trajectory("next")) + "\n")
    bad, good = list(fmt.parse(path))
    assert isinstance(bad, BadRecord) and bad.where.startswith("runs.jsonl:1") and reason in bad.reason, bad
    assert isinstance(good, Conversation) and good.rollout_id == "next"


def test_hostile_files_are_bad_records_never_exceptions(tmp_path, monkeypatch):
    deep = tmp_path / "deep.json"
    deep.write_text('{\n"steps": ' + "[" * 100 + "]" * 100 + "}")
    assert [b.line() for b in fmt.parse(deep)] == ["deep.json: nested deeper than 64 levels"]
    cut = tmp_path / "cut.json"
    cut.write_text(json.dumps(trajectory(), indent=2)[:-40])
    assert [b.reason[:8] for b in fmt.parse(cut)] == ["not JSON"]
    monkeypatch.setattr(fmt, "json_lines", lambda path: lines.json_lines(path, limit=100))
    huge = tmp_path / "huge.jsonl"
    huge.write_text(json.dumps(trajectory()) + "\n")
    assert [b.line() for b in fmt.parse(huge)] == ["huge.jsonl:1: longer than 100 bytes"]
    monkeypatch.setattr(fmt, "json_document", lambda path: lines.json_document(path, limit=100))
    assert [b.line() for b in fmt.parse(cut)] == ["cut.json: longer than 100 bytes"]


def test_sniff_says_yes_to_trajectories_and_no_to_chat_and_openai_lines():
    assert fmt.sniff(json.dumps(trajectory(), indent=2).encode()[: lines.SNIFF_BYTES])
    assert fmt.sniff(b'{"session_id": "s", "schema_version":"ATIF-v1.2", "steps": []}\n')
    assert not fmt.sniff(json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode() + b"\n")
    assert not fmt.sniff(json.dumps({"request": {"messages": []}, "response": {}}).encode() + b"\n")
    assert not fmt.sniff(b'{"resourceSpans": []}') and not fmt.sniff(b"")
