"""``--format openai``: request/response logs of real producers, Batch output lines and hostile lines."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
from tracebank.collect.conversation import BadRecord, Conversation, spool_entry
from tracebank.collect.formats import lines
from tracebank.collect.formats import openai as fmt
from tracebank.serve.process import start_cpu_server

from tests.fixtures.openai_log import logging_client

# Real vLLM 0.32.0 bodies, recorded by tests/serve/record_vllm.py: the source of the field names
# this parser reads (top-level `prompt_token_ids`, per-choice `token_ids`, `logprobs.content[]`).
VLLM = json.loads((Path(__file__).parents[1] / "serve" / "fixtures" / "vllm_responses.json").read_text())
QUESTION = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}]


def write_lines(path: Path, *records: Any) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def parsed(path: Path) -> tuple[list[Conversation], list[BadRecord]]:
    out = list(fmt.parse(path))
    return [c for c in out if isinstance(c, Conversation)], [b for b in out if isinstance(b, BadRecord)]


@pytest.fixture(scope="module")
def cpu_server(tmp_path_factory):
    from tracebank.train.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path_factory.mktemp("tiny-model"))
    with start_cpu_server(model, served_model_name="tiny", max_model_len=512, threads=1) as server:
        yield server


def test_the_openai_clients_logged_calls_keep_the_servers_token_ids(cpu_server, tmp_path):
    log = tmp_path / "calls.jsonl"
    client = logging_client(cpu_server.base_url, log)
    ask = functools.partial(
        client.chat.completions.create,
        model="tiny",
        max_tokens=4,
        temperature=0,
        extra_body={"return_token_ids": True},
    )
    first = ask(messages=QUESTION, metadata={"conversation_id": "c-1"})
    turn = [*QUESTION, {"role": "assistant", "content": first.choices[0].message.content}]
    second = ask(messages=[*turn, {"role": "user", "content": "Sure?"}], metadata={"conversation_id": "c-1"})
    alone = ask(messages=QUESTION)
    assert fmt.sniff(lines.head(log))
    conversations, bad = parsed(log)
    assert bad == [] and [c.rollout_id for c in conversations][0] == "c-1"
    grouped, single = conversations
    assert [c.prompt_token_ids for c in grouped.calls] == [
        first.model_extra["prompt_token_ids"],
        second.model_extra["prompt_token_ids"],
    ]
    assert grouped.calls[1].messages[2] == turn[2] and grouped.calls[1].model == "tiny"
    assert single.calls[0].response_token_ids == alone.choices[0].model_extra["token_ids"]
    assert len(single.calls[0].response_token_ids or []) == alone.usage.completion_tokens
    assert single.calls[0].output == {"role": "assistant", "content": alone.choices[0].message.content}
    assert single.rollout_id.startswith("sha256:") and single.calls[0].timestamp == alone.created
    assert [c.rollout_id for c in parsed(log)[0]] == [c.rollout_id for c in conversations]  # re-import
    entry = spool_entry(grouped)  # what the collect path commits: strict JSON, one event per call
    assert len(json.loads(json.dumps(entry, allow_nan=False))["events_by_attempt"]["1"]) == 2


def test_real_vllm_responses_give_token_ids_logprobs_and_tool_calls(tmp_path):
    log = write_lines(
        tmp_path / "vllm.jsonl",
        *(
            {"request": VLLM["requests"][k], "response": VLLM["responses"][k]["body"]}
            for k in ("tool_call", "logprobs")
        ),
    )
    (tool, logprobs), bad = parsed(log)
    assert bad == []
    body = VLLM["responses"]["tool_call"]["body"]
    call = tool.calls[0]
    assert (
        call.prompt_token_ids == body["prompt_token_ids"]
        and call.response_token_ids == body["choices"][0]["token_ids"]
    )
    assert call.output["tool_calls"][0]["function"]["name"] == "get_weather" and "refusal" not in call.output
    assert call.tools == VLLM["requests"]["tool_call"]["tools"] and call.finish_reason == "tool_calls"
    assert call.usage == body["usage"]
    want = [c["logprob"] for c in VLLM["responses"]["logprobs"]["body"]["choices"][0]["logprobs"]["content"]]
    assert logprobs.calls[0].logprobs == want and logprobs.calls[0].prompt_token_ids is None


def batch_line(
    custom_id: str, status: int, body: Any, error: Any = None, request: Any = None
) -> dict[str, Any]:
    """An OpenAI Batch API output line (https://platform.openai.com/docs/guides/batch)."""
    line = {
        "id": f"batch_req_{custom_id}",
        "custom_id": custom_id,
        "response": {"status_code": status, "request_id": "req_1", "body": body},
        "error": error,
    }
    return line if request is None else line | {"request": request}


def test_batch_output_lines_need_their_request_and_a_success(tmp_path):
    body = VLLM["responses"]["plain_token_ids"]["body"]
    input_line = {
        "custom_id": "r-1",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"messages": QUESTION},
    }
    log = write_lines(
        tmp_path / "batch.jsonl",
        batch_line("r-1", 200, body, request=input_line),
        batch_line("r-2", 200, body),
        batch_line("r-3", 400, {"error": {"message": "bad model"}}, request=input_line),
        batch_line("r-4", None, None, error={"code": "expired", "message": "expired"}, request=input_line)
        | {"response": None},
    )
    assert fmt.sniff(lines.head(log))
    (conversation,), bad = parsed(log)
    assert conversation.rollout_id == "batch_req_r-1" and conversation.metadata == {"custom_ids": ["r-1"]}
    assert conversation.calls[0].messages == QUESTION and conversation.calls[0].response_token_ids
    assert [b.line() for b in bad] == [
        "batch.jsonl:2: a Batch output line without its request: join the input line in as `request`",
        "batch.jsonl:3: batch request failed (status 400)",
        "batch.jsonl:4: batch request failed (status None: expired)",
    ]


def test_a_conversations_lines_must_be_consecutive_and_the_last_reward_counts(tmp_path):
    response = VLLM["responses"]["plain"]["body"]
    two = response | {"choices": response["choices"] * 3}
    log = write_lines(
        tmp_path / "g.jsonl",
        {"conversation_id": "a", "request": {"messages": QUESTION}, "response": two, "reward": 0.5},
        {"session_id": "a", "request": {"messages": QUESTION}, "response": response, "reward": 1},
        {"request": {"messages": QUESTION, "metadata": {"session_id": "b"}}, "response": response},
        {"conversation_id": "a", "request": {"messages": QUESTION}, "response": response},
    )
    (a, b), bad = parsed(log)
    assert (a.rollout_id, len(a.calls), a.reward, a.metadata) == ("a", 2, 1.0, {"other_choices": 2})
    assert (b.rollout_id, len(b.calls), b.reward) == ("b", 1, None)
    assert [x.line() for x in bad] == ["g.jsonl:4: conversation 'a' continues after other lines"]


GOOD = {"request": {"messages": QUESTION}, "response": VLLM["responses"]["plain_token_ids"]["body"]}
CHOICE = GOOD["response"]["choices"][0]


@pytest.mark.parametrize(
    "record, reason",
    [
        ({"messages": QUESTION}, "neither a request/response log line nor a Batch API output line"),
        (GOOD | {"request": {"messages": "hi"}}, "request.messages is not a list of messages with a role"),
        (GOOD | {"request": {"messages": [{"content": "x"}]}}, "request.messages is not a list of messages"),
        (
            GOOD | {"request": {"messages": QUESTION, "tools": {"a": 1}}},
            "request.tools is not a list of objects",
        ),
        (GOOD | {"response": [GOOD["response"]]}, "a streamed response (a list of chunks)"),
        (GOOD | {"response": "ok"}, "response is not an object"),
        (GOOD | {"response": {"choices": []}}, "response.choices is not a non-empty list of objects"),
        (
            GOOD | {"response": {"error": {"message": "no such model"}}},
            "the response is an error (no such model)",
        ),
        (GOOD | {"response": {"choices": [{"message": {"role": "user"}}]}}, "not an assistant message"),
        (
            GOOD | {"response": GOOD["response"] | {"prompt_token_ids": [1, -2]}},
            "prompt_token_ids is not a list",
        ),
        (
            GOOD | {"response": GOOD["response"] | {"prompt_token_ids": "1 2"}},
            "prompt_token_ids is not a list",
        ),
        (
            GOOD | {"response": {"choices": [CHOICE | {"token_ids": [True]}]}},
            "choices[0].token_ids is not a list",
        ),
        (
            GOOD | {"response": {"choices": [CHOICE | {"logprobs": {"content": 3}}]}},
            "logprobs.content is not a list",
        ),
        (
            GOOD | {"response": {"choices": [CHOICE | {"logprobs": {"content": [{"logprob": "x"}]}}]}},
            "logprob is not a finite number",
        ),
        (
            GOOD | {"response": {"choices": [CHOICE | {"logprobs": {"content": [{"logprob": -1}]}}]}},
            "1 logprobs for 8",
        ),
        (
            '{"request": {"messages": []}, "response": {"choices": [{"message": {"content": NaN}}]}}',
            "NaN or Infinity",
        ),
        ('{"reward": Infinity, ' + json.dumps(GOOD)[1:], "NaN or Infinity"),
        ('{"request": ' * 100 + "1" + "}" * 100, "nested deeper than 64 levels"),
        ("[1, 2]", "not a JSON object (a list)"),
        ('{"request": {', "not JSON"),
        ("x" * 5000, "longer than 4000 bytes"),
    ],
)
def test_a_hostile_line_is_one_bad_record_naming_file_and_line(tmp_path, monkeypatch, record, reason):
    monkeypatch.setattr(fmt, "json_lines", functools.partial(lines.json_lines, limit=4000))
    log = write_lines(tmp_path / "h.jsonl", record, GOOD)
    conversations, bad = parsed(log)
    assert (
        len(conversations) == 1
        and conversations[0].calls[0].prompt_token_ids == GOOD["response"]["prompt_token_ids"]
    )
    assert len(bad) == 1 and bad[0].where == "h.jsonl:1" and reason in bad[0].reason, bad


def test_sniff_says_yes_to_logs_and_batch_lines_and_no_to_chat_atif_and_otlp():
    def head(record: Any) -> bytes:
        return json.dumps(record).encode() + b"\n"

    assert fmt.sniff(head(GOOD)) and fmt.sniff(head(batch_line("x", 200, {})))
    assert fmt.sniff(json.dumps(GOOD).encode())  # a one-line file without a newline
    assert fmt.sniff(b"\n  \n" + head(GOOD))
    long_first = b'{"request": {"messages": [{"role": "user", "content": "' + b"x" * lines.SNIFF_BYTES
    assert fmt.sniff((long_first + b'"}]}, "response": {}}\n')[: lines.SNIFF_BYTES])
    assert not fmt.sniff(head({"messages": QUESTION, "tools": []}))
    assert not fmt.sniff(
        head({"custom_id": "r", "method": "POST", "url": "/v1/chat/completions", "body": {}})
    )
    assert not fmt.sniff(b'{\n  "schema_version": "ATIF-v1.6",\n  "session_id": "s",\n  "steps": []\n}\n')
    assert not fmt.sniff(head({"resourceSpans": []})) and not fmt.sniff(b"") and not fmt.sniff(b"\xff\xfe")
