"""The CPU model server speaks vLLM's chat-completions wire format (run as a real subprocess)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from tracebank.serve.config import CpuServerConfig
from tracebank.serve.cpu_server import ChatModel, SamplingSpec, main

from tests.serve.conftest import MODEL_NAME

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}]


def post(server, body: dict, **kw) -> httpx.Response:
    return httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=60, **kw)


def chat(server, **fields) -> dict:
    resp = post(
        server, {"model": MODEL_NAME, "messages": MESSAGES, "max_tokens": 8, "temperature": 0, **fields}
    )
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_health_and_models(cpu_server):
    root = cpu_server.base_url.removesuffix("/v1")
    assert httpx.get(f"{root}/health").status_code == 200
    models = httpx.get(f"{cpu_server.base_url}/models").json()
    assert models["object"] == "list"
    assert [(m["id"], m["object"], m["max_model_len"]) for m in models["data"]] == [
        (MODEL_NAME, "model", 512)
    ]


def test_return_token_ids_gives_prompt_and_response_ids(cpu_server, tiny_tokenizer):
    body = chat(cpu_server, return_token_ids=True)
    assert body["id"].startswith("chatcmpl-")
    assert (body["object"], body["model"]) == ("chat.completion", MODEL_NAME)
    [choice] = body["choices"]
    assert choice["index"] == 0 and choice["logprobs"] is None
    assert choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] == "length"  # a random-weight model does not stop within 8 tokens
    # vLLM's placement: prompt ids at the top level, response ids on the choice.
    prompt_ids, response_ids = body["prompt_token_ids"], choice["token_ids"]
    template = tiny_tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert tiny_tokenizer.decode(prompt_ids) == template
    assert (
        prompt_ids
        == tiny_tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True)[
            "input_ids"
        ]
    )
    assert len(response_ids) == 8
    assert tiny_tokenizer.decode(response_ids, skip_special_tokens=True) == choice["message"]["content"]
    assert body["usage"] == {
        "prompt_tokens": len(prompt_ids),
        "completion_tokens": 8,
        "total_tokens": len(prompt_ids) + 8,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }


def test_token_ids_null_unless_requested(cpu_server):
    body = chat(cpu_server)
    assert body["prompt_token_ids"] is None  # present as null, as vLLM sends it
    assert body["choices"][0]["token_ids"] is None
    assert chat(cpu_server, return_token_ids=False).keys() == body.keys()


def test_greedy_is_deterministic_and_seeded_sampling_repeats(cpu_server):
    assert (
        chat(cpu_server, return_token_ids=True)["choices"][0]["token_ids"]
        == chat(cpu_server, return_token_ids=True)["choices"][0]["token_ids"]
    )
    seeded = [
        chat(cpu_server, temperature=1.0, seed=7, return_token_ids=True)["choices"][0]["token_ids"]
        for _ in range(2)
    ]
    assert seeded[0] == seeded[1]


def test_max_completion_tokens_wins_and_default_applies(cpu_server):
    body = chat(cpu_server, max_tokens=None, max_completion_tokens=3, return_token_ids=True)
    assert len(body["choices"][0]["token_ids"]) == 3
    body = chat(cpu_server, max_tokens=None, return_token_ids=True)
    assert len(body["choices"][0]["token_ids"]) == 16  # --default-max-tokens


SAMPLED = {"temperature": 1.0, "seed": 11, "max_tokens": 16}  # varied text; greedy repeats one token


def pick_stop(text: str) -> tuple[int, str]:
    """A two-character stop string whose first occurrence in ``text`` is after its start."""
    for k in range(1, len(text) - 1):
        stop = text[k : k + 2]
        if "\ufffd" not in stop and text.find(stop) == k:
            return k, stop
    raise AssertionError(f"no usable stop string in {text!r}")


def test_stop_string_cuts_text_but_keeps_ids(cpu_server, tiny_tokenizer):
    free = chat(cpu_server, **SAMPLED, return_token_ids=True)["choices"][0]
    text = free["message"]["content"]
    k, stop = pick_stop(text)
    body = chat(cpu_server, **SAMPLED, stop=[stop], return_token_ids=True)["choices"][0]
    assert body["finish_reason"] == "stop" and body["stop_reason"] == stop
    assert body["message"]["content"] == text[:k] != ""
    # The ids run up to the token that completed the stop string, and are a prefix of the free run.
    ids = body["token_ids"]
    assert ids == free["token_ids"][: len(ids)] and len(ids) < len(free["token_ids"])
    assert stop in tiny_tokenizer.decode(ids, skip_special_tokens=True)


def test_stop_token_id_ends_generation_and_stays_in_ids(cpu_server):
    first = chat(cpu_server, max_tokens=1, return_token_ids=True)["choices"][0]["token_ids"][0]
    body = chat(cpu_server, stop_token_ids=[first], return_token_ids=True)["choices"][0]
    assert (body["finish_reason"], body["stop_reason"], body["token_ids"]) == ("stop", first, [first])
    assert body["message"]["content"] == ""


def test_eos_is_kept_in_token_ids_like_vllm(tiny_model_dir):
    """vLLM returns the EOS that ended a completion in token_ids (and not in the text)."""
    model = ChatModel(CpuServerConfig(model=Path(tiny_model_dir)))
    _, prompt = model.render(MESSAGES)
    greedy = model.generate(prompt, SamplingSpec(max_tokens=3, temperature=0))
    model.eos_token_ids = frozenset({greedy.token_ids[0]})  # make the model's first token its EOS
    ended = model.generate(prompt, SamplingSpec(max_tokens=3, temperature=0))
    assert ended.token_ids == greedy.token_ids[:1]
    assert (ended.finish_reason, ended.stop_reason, ended.text) == ("stop", None, "")
    ignored = model.generate(prompt, SamplingSpec(max_tokens=3, temperature=0, ignore_eos=True))
    assert ignored.token_ids == greedy.token_ids


def test_streaming_matches_the_full_response(cpu_server):
    full = chat(cpu_server, **SAMPLED, return_token_ids=True)
    with httpx.stream(
        "POST",
        f"{cpu_server.base_url}/chat/completions",
        timeout=60,
        json={
            "model": MODEL_NAME,
            "messages": MESSAGES,
            **SAMPLED,
            "stream": True,
            "return_token_ids": True,
            "stream_options": {"include_usage": True},
        },
    ) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in resp.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[0]["prompt_token_ids"] == full["prompt_token_ids"]
    usage, content = chunks[-1], [c for c in chunks[:-1]]
    streamed_usage = {k: v for k, v in full["usage"].items() if not k.endswith("_details")}
    assert usage["choices"] == [] and usage["usage"] == streamed_usage
    assert (
        "".join(c["choices"][0]["delta"].get("content", "") for c in content)
        == full["choices"][0]["message"]["content"]
    )
    assert [i for c in content for i in c["choices"][0].get("token_ids") or []] == full["choices"][0][
        "token_ids"
    ]
    assert [c["choices"][0]["finish_reason"] for c in content][-1] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in content[:-1])


def test_openai_client_reads_both_shapes(cpu_server):
    from openai import OpenAI

    client = OpenAI(base_url=cpu_server.base_url, api_key="unused")
    resp = client.chat.completions.create(
        model=MODEL_NAME,
        messages=MESSAGES,
        max_tokens=5,
        temperature=0,
        extra_body={"return_token_ids": True},
    )
    assert len(resp.model_extra["prompt_token_ids"]) == resp.usage.prompt_tokens
    assert len(resp.choices[0].model_extra["token_ids"]) == 5
    stream = client.chat.completions.create(
        model=MODEL_NAME, messages=MESSAGES, max_tokens=5, temperature=0, stream=True
    )
    assert (
        "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        == resp.choices[0].message.content
    )


def test_tools_and_content_parts_are_accepted(cpu_server):
    tools = [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}]
    parts = [
        {"role": "user", "content": [{"type": "text", "text": "What is"}, {"type": "text", "text": "2+2?"}]}
    ]
    flat = [{"role": "user", "content": "What is\n2+2?"}]
    a = chat(cpu_server, messages=parts, tools=tools, tool_choice="none", return_token_ids=True)
    b = chat(cpu_server, messages=flat, return_token_ids=True)
    assert a["prompt_token_ids"] == b["prompt_token_ids"]


@pytest.mark.parametrize(
    "body, status, needle",
    [
        ({"model": "other", "messages": MESSAGES}, 404, "The model `other` does not exist."),
        (
            {"model": MODEL_NAME, "messages": MESSAGES, "max_tokens": 600},
            400,
            "maximum context length is 512",
        ),
        ({"model": MODEL_NAME, "messages": MESSAGES, "n": 2}, 400, "n=1"),
        ({"model": MODEL_NAME, "messages": []}, 400, "messages must be a non-empty list"),
        (
            {"model": MODEL_NAME, "messages": MESSAGES, "temperature": "hot"},
            400,
            "temperature must be a number",
        ),
        ({"model": MODEL_NAME, "messages": MESSAGES, "stop": [""]}, 400, "stop must be"),
    ],
)
def test_bad_requests_get_openai_errors(cpu_server, body, status, needle):
    resp = post(cpu_server, body)
    assert resp.status_code == status
    error = resp.json()["error"]
    assert needle in error["message"] and error["code"] == status


def test_invalid_json_is_a_400(cpu_server):
    resp = httpx.post(
        f"{cpu_server.base_url}/chat/completions",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    assert resp.status_code == 400 and "not valid JSON" in resp.json()["error"]["message"]


def test_entry_point_reports_a_missing_model_in_one_line(tmp_path, capsys):
    assert main(["--model", str(tmp_path / "nowhere"), "--port", "9"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"Error: {tmp_path / 'nowhere'} is not a model folder (no config.json) "
        "(pass a local Hugging Face model folder to --model)"
    ]


def test_streaming_with_a_stop_string_sends_the_cut_text(cpu_server):
    _, stop = pick_stop(chat(cpu_server, **SAMPLED)["choices"][0]["message"]["content"])
    full = chat(cpu_server, **SAMPLED, stop=stop, return_token_ids=True)["choices"][0]
    with httpx.stream(
        "POST",
        f"{cpu_server.base_url}/chat/completions",
        timeout=60,
        json={
            "model": MODEL_NAME,
            "messages": MESSAGES,
            **SAMPLED,
            "stream": True,
            "stop": stop,
            "return_token_ids": True,
        },
    ) as resp:
        chunks = [
            json.loads(line.removeprefix("data: "))
            for line in resp.iter_lines()
            if line and line != "data: [DONE]"
        ]
    choices = [c["choices"][0] for c in chunks]
    assert "".join(c["delta"].get("content", "") for c in choices) == full["message"]["content"] != ""
    assert [i for c in choices for i in c.get("token_ids") or []] == full["token_ids"]
    assert (choices[-1]["finish_reason"], choices[-1]["stop_reason"]) == ("stop", stop)
