"""Proxy spans of a tool-calling rollout and of replies whose ids cannot round-trip.

The ``litellm_request`` span holds what LiteLLM 1.108's OpenTelemetry logger writes
(``_transform_messages_to_otel_semantic_conventions``, ``set_tools_attributes``): each
message as ``{"role", "parts": [text parts]}`` with the OpenAI ``tool_calls`` /
``tool_call_id`` fields kept beside the parts, and the request's tools flattened into
``llm.request.functions.N.name|description|parameters``.
"""

from __future__ import annotations

import json
from typing import Any

from tests.fixtures.proxy_spans import Call, call_spans, reward_span

T0 = 1_700_100_000.0
WEATHER_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def _with_messages(
    spans: list[Any], inputs: list[dict[str, Any]], outputs: list[dict[str, Any]]
) -> list[Any]:
    """The call's spans with its litellm_request messages and tools replaced, as LiteLLM writes them."""
    out = []
    for span in spans:
        if span.name == "litellm_request":
            attrs = dict(span.attributes)
            attrs["gen_ai.input.messages"] = json.dumps(inputs)
            attrs["gen_ai.output.messages"] = json.dumps(outputs)
            attrs["llm.request.functions.0.name"] = WEATHER_TOOL["name"]
            attrs["llm.request.functions.0.description"] = WEATHER_TOOL["description"]
            attrs["llm.request.functions.0.parameters"] = json.dumps(WEATHER_TOOL["parameters"])
            span = span.model_copy(update={"attributes": attrs})
        out.append(span)
    return out


def _text(role: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}], **extra}


def tool_rollout(tokenizer: Any, system: str) -> list[Any]:
    """ro-tool: the model calls get_weather, reads the result, answers; reward 0.9."""
    ids = lambda text: list(tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    first_in = [_text("system", system), _text("user", "What is the weather in Paris?")]
    call_msg = {"role": "assistant", "parts": [], "tool_calls": [WEATHER_CALL]}
    tool_msg = _text("tool", "sunny, 21 C", tool_call_id="call_1")
    answer = _text("assistant", "It is sunny, 21 C.", finish_reason="stop")
    c1 = Call(prompt_ids=ids("weather in Paris?"), response_ids=ids('get_weather {"city": "Paris"}'))
    c2 = Call(
        prompt_ids=c1.prompt_ids + c1.response_ids + ids("sunny, 21 C"),
        response_ids=ids("It is sunny, 21 C."),
    )
    spans = _with_messages(
        call_spans("ro-tool", "at-tool", 1, c1, T0), first_in, [{**call_msg, "finish_reason": "tool_calls"}]
    )
    spans += _with_messages(
        call_spans("ro-tool", "at-tool", 2, c2, T0 + 1), [*first_in, call_msg, tool_msg], [answer]
    )
    return spans + [reward_span("ro-tool", "at-tool", 3, 0.9, T0 + 2)]


def _edge_call(tokenizer: Any, system: str, question: str, reply: str, reply_ids: list[int]) -> Call:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    prompt = list(
        tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)["input_ids"]
    )
    return Call(prompt_ids=prompt, response_ids=reply_ids, messages=messages, reply=reply)


def edge_rollouts(tokenizer: Any, system: str) -> list[Any]:
    """ro-cut: a reply stopped by max-tokens (no end-of-turn); ro-byte: a lone UTF-8 lead byte."""
    end = list(tokenizer("<|im_end|>\n", add_special_tokens=False)["input_ids"])
    cut = _edge_call(
        tokenizer,
        system,
        "What is 27 times 14?",
        "37",
        list(tokenizer("37", add_special_tokens=False)["input_ids"]),
    )
    lead_byte = tokenizer.convert_tokens_to_ids("â")  # byte 0xE2 in the byte-level alphabet
    byte = _edge_call(tokenizer, system, "Say an arrow.", "\ufffd", [lead_byte, *end])
    spans = call_spans("ro-cut", "at-cut", 1, cut, T0 + 10) + [
        reward_span("ro-cut", "at-cut", 2, 0.1, T0 + 11)
    ]
    spans += call_spans("ro-byte", "at-byte", 1, byte, T0 + 20) + [
        reward_span("ro-byte", "at-byte", 2, 0.2, T0 + 21)
    ]
    return spans


def tool_and_edge_spans(tokenizer: Any, system: str) -> list[Any]:
    return tool_rollout(tokenizer, system) + edge_rollouts(tokenizer, system)
