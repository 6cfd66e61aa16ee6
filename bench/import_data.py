"""Synthetic traces of other agents for bench.import_bench: seed 003-style chat lines and the same
conversations as OpenTelemetry GenAI-semconv chat spans (OTLP/JSON), and a BPE tokenizer trained
here (no hub) whose chat template renders tools and tool calls and marks the assistant's turns."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tracebank.train.tiny_model import CORPUS

_WORDS = sorted(set(re.findall(r"[a-z]+", CORPUS.read_text().lower())))
TOOL_NAMES = ("get_weather", "search_docs", "run_sql", "send_email", "read_file", "calculator")


def _tool(name: str, rng: random.Random) -> dict[str, Any]:
    props = {w: {"type": "string", "description": _text(rng, 4, 9)} for w in rng.sample(_WORDS, 3)}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": _text(rng, 8, 20),
            "parameters": {"type": "object", "properties": props, "required": sorted(props)[:1]},
        },
    }


def _text(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choices(_WORDS, k=rng.randint(lo, hi))).capitalize() + "."


def conversation(i: int, rng: random.Random) -> dict[str, Any]:
    """One seed 003 line: system, user, 1-3 rounds of assistant tool call + tool result, an answer."""
    tools = [_tool(n, rng) for n in rng.sample(TOOL_NAMES, rng.randint(2, 4))]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": _text(rng, 15, 40)},
        {"role": "user", "content": _text(rng, 10, 60)},
    ]
    for k in range(rng.randint(1, 3)):
        fn = rng.choice(tools)["function"]
        args = {p: _text(rng, 1, 4) for p in fn["parameters"]["properties"]}
        named = {"name": fn["name"], "arguments": json.dumps(args)}
        call = {"id": f"call_{k}", "type": "function", "function": named}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{k}", "content": _text(rng, 10, 80)})
    messages.append({"role": "assistant", "content": _text(rng, 10, 60)})
    return {"id": f"conv-{i:07d}", "messages": messages, "tools": tools, "reward": round(rng.random(), 3)}


def conversations(n: int, seed: int = 29) -> Iterator[dict[str, Any]]:
    rng = random.Random(seed)
    for i in range(n):
        yield conversation(i, rng)


def write_chat(path: Path, n: int, seed: int = 29) -> int:
    """``n`` chat lines to ``path``; its size in bytes."""
    with path.open("w") as out:
        for record in conversations(n, seed):
            out.write(json.dumps(record) + "\n")
    return path.stat().st_size


# -- the same conversations as GenAI semconv spans --


def _parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    if message["role"] == "tool":
        return [{"type": "tool_call_response", "id": message["tool_call_id"], "response": message["content"]}]
    parts: list[dict[str, Any]] = []
    if message.get("content"):
        parts.append({"type": "text", "content": message["content"]})
    for call in message.get("tool_calls") or []:
        fn = call["function"]
        arguments = json.loads(fn["arguments"])
        parts.append({"type": "tool_call", "id": call["id"], "name": fn["name"], "arguments": arguments})
    return parts


def _attr(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    return {"key": key, "value": {"stringValue": value}}


def trace_spans(i: int, record: dict[str, Any]) -> list[dict[str, Any]]:
    """A chat span per assistant turn (its inputs: everything before it), plus the agent's span
    carrying the reward, as an OpenTelemetry-instrumented agent exports them."""
    trace = f"{i + 1:032x}"
    system, *rest = record["messages"]
    tools = json.dumps([t["function"] | {"type": "function"} for t in record["tools"]])
    instructions = json.dumps([{"type": "text", "content": system["content"]}])
    start = 1_700_000_000_000_000_000 + i * 10_000_000_000
    spans = [
        {
            "traceId": trace, "spanId": f"{i + 1:08x}{0:08x}", "name": "invoke_agent",
            "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 9_000_000_000),
            "attributes": [_attr("gen_ai.operation.name", "invoke_agent"),
                           _attr("tracebank.reward", record["reward"])],
        }
    ]  # fmt: skip
    for k, message in enumerate(rest):
        if message["role"] != "assistant":
            continue
        inputs = [{"role": m["role"], "parts": _parts(m)} for m in rest[:k]]
        finish = "tool_call" if message.get("tool_calls") else "stop"
        output = [{"role": "assistant", "parts": _parts(message), "finish_reason": finish}]
        t = start + (k + 1) * 100_000_000
        attrs = {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "bench",
            "gen_ai.system_instructions": instructions, "gen_ai.tool.definitions": tools,
            "gen_ai.input.messages": json.dumps(inputs), "gen_ai.output.messages": json.dumps(output),
        }  # fmt: skip
        spans.append(
            {
                "traceId": trace, "spanId": f"{i + 1:08x}{k + 1:08x}", "parentSpanId": spans[0]["spanId"],
                "name": "chat bench", "startTimeUnixNano": str(t), "endTimeUnixNano": str(t + 50_000_000),
                "attributes": [_attr(key, v) for key, v in attrs.items()],
            }
        )  # fmt: skip
    return spans


def otlp_bodies(n: int, per_request: int, seed: int = 31) -> Iterator[tuple[bytes, int]]:
    """OTLP/JSON export request bodies of ``per_request`` traces each, and their span counts."""
    batch: list[dict[str, Any]] = []
    for i, record in enumerate(conversations(n, seed)):
        batch += trace_spans(i, record)
        if (i + 1) % per_request == 0 or i == n - 1:
            resource = {"attributes": [_attr("service.name", "bench-agent")]}
            scope = {"scope": {"name": "bench"}, "spans": batch}
            body = {"resourceSpans": [{"resource": resource, "scopeSpans": [scope]}]}
            yield json.dumps(body).encode(), len(batch)
            batch = []


# -- a BPE tokenizer of realistic size, trained here --


def build_tokenizer(folder: Path, corpus: Path, vocab_size: int = 32_000) -> tuple[Path, int]:
    """A byte-level BPE of up to ``vocab_size`` trained on ``corpus`` (the bench's own chat texts and the
    tiny corpus), with the tests' generation-marked tool template; the folder and its vocabulary size."""
    from tokenizers import ByteLevelBPETokenizer
    from tracebank.train.tiny_model import SPECIAL_TOKENS, TOOL_TOKENS
    from transformers import PreTrainedTokenizerFast

    from tests.fixtures.text_calls import GENERATION_TOOL_TEMPLATE

    bpe = ByteLevelBPETokenizer(add_prefix_space=False)  # what train.tiny_model builds, bigger
    bpe.train(
        [str(corpus), str(CORPUS)],
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        min_frequency=0,
        show_progress=False,
    )
    ends = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}  # no bos or unk, as in the tests
    fast = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, **ends)
    fast.add_tokens(TOOL_TOKENS)
    fast.chat_template = GENERATION_TOOL_TEMPLATE
    folder.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(folder))
    return folder, len(fast)
