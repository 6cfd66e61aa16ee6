"""The CPU server answers the parity request set as the real vLLM did (recorded in fixtures/).

Both serve the same tiny Qwen3 (float32, greedy), so beyond field names, JSON types
and null-versus-missing, the token ids, texts, logprobs and finish reasons must match
too. vLLM's tool calls were forced with a regex (a random model never writes one);
the CPU server cannot constrain decoding, so it is given vLLM's recorded tokens as
its choices (``Replaying``) and must turn them into the same tool calls, whole and
streamed. Re-record with ``python -m tests.serve.record_vllm`` when vLLM's pin moves.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tracebank.serve.config import CpuServerConfig
from tracebank.serve.cpu_server import ChatModel, completion_body, iter_stream, prepare
from tracebank.serve.process import start_cpu_server

from tests.serve import vllm_parity as parity

FIXTURE = parity.load_fixture()
PLAIN = ["plain", "plain_token_ids", "length_stop", "logprobs", "tool_history", "unknown_model"]
STREAMS = ["stream", "stream_token_ids"]


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory) -> Path:
    return parity.recorded_model(tmp_path_factory.mktemp("qwen3"))


@pytest.fixture(scope="module")
def server(qwen3_dir, tmp_path_factory):
    with start_cpu_server(
        qwen3_dir,
        served_model_name=parity.MODEL_NAME,
        max_model_len=parity.MAX_MODEL_LEN,
        log_path=tmp_path_factory.mktemp("parity") / "server.log",
        threads=1,
        tool_call_parser="hermes",
    ) as srv:
        yield srv


def ask(server, name: str) -> dict[str, Any]:
    resp = httpx.post(f"{server.base_url}/chat/completions", json=parity.request_body(name), timeout=120)
    if parity.REQUESTS[name].get("stream") and resp.status_code == 200:
        return {"status": resp.status_code, "events": parity.parse_sse(resp.text)}
    return {"status": resp.status_code, "body": resp.json()}


def without_ids(value: Any) -> Any:
    """``value`` without the random parts (ids, timestamps, the server's fingerprint)."""
    if isinstance(value, dict):
        return {
            k: without_ids(v) for k, v in value.items() if k not in ("id", "created", "system_fingerprint")
        }
    if isinstance(value, list):
        return [without_ids(v) for v in value]
    return value


def split_stream(events: list[Any]) -> tuple[list[Any], list[Any]]:
    """(the shapes of the opening, finishing, usage and [DONE] events; the shapes of the ones between).

    vLLM sends what is ready when the client reads: the same request may come back with one
    chunk per token or with every token in the finishing chunk, so only the chunks around the
    content are fixed; the ones between must look like content chunks vLLM sends.
    """
    finish = next(
        i for i, e in enumerate(events) if e != "[DONE]" and e["choices"] and e["choices"][0]["finish_reason"]
    )
    fixed = [events[0], *events[finish:]]
    return [e if e == "[DONE]" else parity.shape(e) for e in fixed], [
        parity.shape(e) for e in events[1:finish]
    ]


def content_chunk_shapes(events: list[Any]) -> list[Any]:
    """The shapes a content chunk between the first and the finishing one may have, per vLLM's stream."""
    fixed, between = split_stream(events)
    finishing = json.loads(json.dumps(fixed[1]))
    choice = finishing["choices"][0]
    choice["finish_reason"] = None
    del choice["stop_reason"]
    finishing.pop("system_fingerprint", None)
    return [*between, finishing]


def reassembled(events: list[Any]) -> dict[str, Any]:
    """What a client rebuilds from a stream: content, tool calls, token ids, finish reason, usage.

    vLLM may put two tokens in one chunk when the client reads slower than it generates,
    so streams are compared by what they add up to (and by their chunk shapes), not chunk by chunk.
    """
    out: dict[str, Any] = {"content": "", "tool_calls": {}, "token_ids": [], "finish_reason": None}
    for event in events[:-1]:
        out["usage"] = event.get("usage", out.get("usage"))
        for choice in event["choices"]:
            delta = choice["delta"]
            out["content"] += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                merged = out["tool_calls"].setdefault(call["index"], {"name": "", "arguments": ""})
                merged["name"] += call["function"].get("name", "")
                merged["arguments"] += call["function"].get("arguments", "")
                merged["type"] = call.get("type", merged.get("type"))
            out["token_ids"] += choice.get("token_ids") or []
            out["finish_reason"] = choice["finish_reason"] or out["finish_reason"]
    out["first"], out["done"] = without_ids(events[0]), events[-1]
    return out


def approx_logprobs(content: list[dict[str, Any]]) -> list[Any]:
    def item(e: dict[str, Any]) -> tuple[str, Any, list[int]]:
        return e["token"], pytest.approx(e["logprob"], abs=1e-3), e["bytes"]

    return [(item(e), [item(t) for t in e["top_logprobs"]]) for e in content]


@pytest.mark.parametrize("name", PLAIN)
def test_plain_responses_match_vllm(server, name):
    want, got = FIXTURE["responses"][name], ask(server, name)
    assert got["status"] == want["status"]
    assert parity.shape(got["body"]) == parity.shape(want["body"])
    if name == "unknown_model":
        assert got["body"] == want["body"]
        return
    if name == "logprobs":
        [g], [w] = got["body"]["choices"], want["body"]["choices"]
        assert approx_logprobs(g.pop("logprobs")["content"]) == approx_logprobs(w["logprobs"]["content"])
        want = {**want, "body": json.loads(json.dumps(want["body"]))}
        want["body"]["choices"][0]["logprobs"] = None
    assert without_ids(got["body"]) | {"choices": None} == without_ids(want["body"]) | {"choices": None}
    g_choice, w_choice = got["body"]["choices"][0], dict(want["body"]["choices"][0])
    if name == "logprobs":
        w_choice.pop("logprobs")
    assert without_ids(g_choice) == without_ids(w_choice)


@pytest.mark.parametrize("name", STREAMS)
def test_streams_match_vllm(server, name):
    want, got = FIXTURE["responses"][name]["events"], ask(server, name)["events"]
    assert split_stream(got)[0] == split_stream(want)[0]
    allowed = content_chunk_shapes(want)
    assert all(chunk in allowed for chunk in split_stream(got)[1])
    assert reassembled(got) == reassembled(want)


class Replaying(ChatModel):
    """The CPU server's model, choosing the tokens vLLM chose (its forward pass still runs)."""

    script: Iterator[int]

    def _pick(self, logits: Any, spec: Any, generator: Any) -> int:  # type: ignore[override]
        return next(self.script)


@pytest.fixture(scope="module")
def replaying(qwen3_dir) -> Replaying:
    return Replaying(
        CpuServerConfig(
            model=qwen3_dir,
            served_model_name=parity.MODEL_NAME,
            max_model_len=parity.MAX_MODEL_LEN,
            tool_call_parser="hermes",
        )
    )


def vllm_tokens(name: str) -> list[int]:
    entry = FIXTURE["responses"][name]
    if "body" in entry:
        return list(entry["body"]["choices"][0]["token_ids"])
    return [t for e in entry["events"][1:] if e != "[DONE]" for c in e["choices"] for t in c["token_ids"]]


def constrained_request(name: str, model: ChatModel) -> Any:
    body = {k: v for k, v in parity.request_body(name).items() if k != "structured_outputs"}
    return prepare(body, model)


def test_tool_call_is_parsed_as_vllm_parses_it(replaying):
    replaying.script = iter(vllm_tokens("tool_call"))
    req = constrained_request("tool_call", replaying)
    got = completion_body(req, replaying.generate(req.prompt_ids, req.spec), replaying.name)
    want = FIXTURE["responses"]["tool_call"]["body"]
    assert parity.shape(got) == parity.shape(want)
    [g], [w] = got["choices"], want["choices"]
    assert g["finish_reason"] == w["finish_reason"] == "tool_calls"
    assert g["message"]["tool_calls"][0]["id"].startswith("chatcmpl-tool-")
    assert without_ids(g) == without_ids(w)
    assert got["prompt_token_ids"] == want["prompt_token_ids"]


def test_streamed_tool_call_matches_vllm(replaying):
    replaying.script = iter(vllm_tokens("tool_call_stream"))
    req = constrained_request("tool_call_stream", replaying)
    got = parity.parse_sse("".join(iter_stream(req, replaying)))
    want = FIXTURE["responses"]["tool_call_stream"]["events"]
    assert split_stream(got)[0] == split_stream(want)[0]
    allowed = content_chunk_shapes(want)
    assert all(chunk in allowed for chunk in split_stream(got)[1])
    rebuilt = reassembled(got)
    assert rebuilt == reassembled(want)
    assert rebuilt["tool_calls"] == {
        0: {"name": "get_weather", "arguments": '{"city": "Paris"}', "type": "function"}
    }
    assert (rebuilt["content"], rebuilt["finish_reason"]) == ("Checking.", "tool_calls")


def test_constrained_decoding_is_refused_not_ignored(server):
    resp = httpx.post(
        f"{server.base_url}/chat/completions", json=parity.request_body("tool_call"), timeout=60
    )
    assert resp.status_code == 400
    assert resp.json()["error"]["message"] == "the CPU server does not support structured_outputs"
