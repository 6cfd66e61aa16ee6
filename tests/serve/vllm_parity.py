"""The fixed request set whose real vLLM responses are recorded, and how a response is reduced to its shape.

``tests/serve/record_vllm.py`` sends these to the real vLLM CPU build and writes
``fixtures/vllm_responses.json``; ``test_vllm_parity.py`` sends them to the CPU
server and compares field by field. Both serve the model ``build_tiny_qwen3_model``
writes for ``MODEL_SEED`` under the name ``MODEL_NAME``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).with_name("fixtures") / "vllm_responses.json"
MODEL_NAME = "tiny"
MODEL_SEED = 0
MAX_MODEL_LEN = 1024

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
#: What the forced tool-calling completion says: text before the call, then one hermes call.
TOOL_CALL_TEXT = 'Checking.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
#: A random-weight model never writes a tool call by itself, so vLLM is made to with a regex.
FORCE_TOOL_CALL = {"regex": TOOL_CALL_TEXT.replace("{", r"\{").replace("}", r"\}").replace(".", r"\.")}
#: A finished tool round trip: the prompt vLLM renders from it must match the CPU server's.
TOOL_HISTORY = [
    *MESSAGES[:1],
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
]

GREEDY = {"messages": MESSAGES, "temperature": 0, "max_tokens": 8}
REQUESTS: dict[str, dict[str, Any]] = {
    "plain": GREEDY,
    "plain_token_ids": {**GREEDY, "return_token_ids": True},
    "length_stop": {**GREEDY, "max_tokens": 3, "return_token_ids": True},
    "logprobs": {**GREEDY, "max_tokens": 4, "logprobs": True, "top_logprobs": 2},
    "stream": {**GREEDY, "max_tokens": 6, "stream": True},
    "stream_token_ids": {
        **GREEDY,
        "max_tokens": 6,
        "stream": True,
        "return_token_ids": True,
        "stream_options": {"include_usage": True},
    },
    "tool_call": {
        "messages": MESSAGES,
        "tools": TOOLS,
        "temperature": 0,
        "max_tokens": 160,
        "return_token_ids": True,
        "structured_outputs": FORCE_TOOL_CALL,
    },
    "tool_call_stream": {
        "messages": MESSAGES,
        "tools": TOOLS,
        "temperature": 0,
        "max_tokens": 160,
        "stream": True,
        "return_token_ids": True,
        "structured_outputs": FORCE_TOOL_CALL,
    },
    "tool_history": {
        "messages": TOOL_HISTORY,
        "tools": TOOLS,
        "temperature": 0,
        "max_tokens": 4,
        "return_token_ids": True,
    },
    "unknown_model": {**GREEDY, "model": "no-such-model"},
}


def vllm_launch(python: Path, model: Path, port: int) -> Any:
    """How the recording starts vLLM: a round's flags (hermes tools), float32 like the CPU server."""
    from tracebank.serve.vllm_server import VllmLaunch

    return VllmLaunch(
        python=python,
        model=model,
        port=port,
        served_model_name=MODEL_NAME,
        max_model_len=MAX_MODEL_LEN,
        dtype="float32",
        enforce_eager=True,
    )


def request_body(name: str) -> dict[str, Any]:
    """The body sent for request ``name`` (the served model unless the request names another)."""
    return {"model": MODEL_NAME, **REQUESTS[name]}


def parse_sse(text: str) -> list[Any]:
    """The JSON payloads of a server-sent event stream, and ``"[DONE]"`` where it ends."""
    events: list[Any] = []
    for line in text.splitlines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def shape(value: Any) -> Any:
    """A value reduced to what parity compares: key sets, JSON types and nulls, not the numbers or text."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(item) for item in value[:1]]
    if value is None:
        return None
    return {bool: "bool", int: "int", float: "float", str: "str"}[type(value)]


def load_fixture() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


def recorded_model(folder: Path) -> Path:
    """The tiny Qwen3 the fixture's responses came from, built in ``folder`` (its weights checked)."""
    from tracebank.train.tiny_model import build_tiny_qwen3_model

    build_tiny_qwen3_model(folder, seed=MODEL_SEED)
    weights = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    assert weights == load_fixture()["model_sha256"], "the tiny Qwen3 changed: re-record the vLLM fixture"
    return folder
