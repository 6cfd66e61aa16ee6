"""Agent Lightning 1.0 events as silver rows: ``llm_calls``, ``rewards``, ``messages``.

A 1.0 rollout's record is its events, in order (they carry no id and no sequence
number: their position is their identity). Bronze ``events`` keeps each event's
JSON whole; silver parses the two well-known types the way 1.0 reads them:

- ``model_request`` (one per gateway call): token ids as the server's triplet view
  takes them (response's top-level ``prompt_token_ids``, else ``choices[0]``'s;
  ``choices[0].token_ids``), chosen-token logprobs (``logprobs.content[].logprob``
  or ``logprobs.token_logprobs``; None when any is missing or not finite), and
  what 1.0 adds: model_version, latency, HTTP status, status, retries, usage,
  finish_reason;
- ``reward``: ``value``, ``message``, ``source``, ``reason``.

The column names follow the 0.3 silver tables where the meaning is the same, so
one query reads both sources; ``sequence_id`` is the event's position.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pyarrow as pa
from tracebank.warehouse import schemas
from tracebank.warehouse.contract import ENGINE, TEXT

MODEL_REQUEST = "model_request"
REWARD = "reward"
CALL_SPAN_NAME = "agl1.model_request"
REWARD_SPAN_NAME = "agl1.reward"


def event_id(rollout_id: str, attempt_id: str, position: int) -> str:
    """A stable id for an event that has none: where it sits in its attempt."""
    return f"{rollout_id}/{attempt_id}/{position}"


def _ints(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(type(v) is int for v in value):
        return value
    return None


def choice_log_probs(choice: dict[str, Any]) -> list[float] | None:
    """Chosen-token logprobs of one choice, None when missing or unusable (1.0's rule)."""
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        return None
    if isinstance(lp.get("content"), list):
        raw = []
        for item in lp["content"]:
            if not isinstance(item, dict) or "logprob" not in item:
                return None
            raw.append(item["logprob"])
    elif isinstance(lp.get("token_logprobs"), list):
        raw = list(lp["token_logprobs"])
    else:
        return None
    out: list[float] = []
    for value in raw:
        try:
            number = float(value)
        except (TypeError, ValueError):
            return None
        if not math.isfinite(number):
            return None
        out.append(number)
    return out


def call_fields(data: dict[str, Any]) -> dict[str, Any]:
    """The typed fields of one ``model_request`` event's data."""
    response = data.get("response")
    response = response if isinstance(response, dict) else {}
    choices = response.get("choices")
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    prompt = response.get("prompt_token_ids") or first.get("prompt_token_ids") or []
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else response.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    http_status = data.get("http_status")
    return {
        "response_id": response.get("id"),
        "model": data.get("model"),
        "model_version": data.get("model_version"),
        "prompt_token_ids": _ints(prompt),
        "response_token_ids": _ints(first.get("token_ids") or []),
        "response_logprobs": choice_log_probs(first) if first else None,
        "status": data.get("status"),
        "http_status": http_status if type(http_status) is int else None,
        "retry_count": data.get("retry_count"),
        "latency_ms": data.get("latency_ms"),
        "finish_reason": data.get("finish_reason") or first.get("finish_reason"),
        "prompt_tokens": usage.get("prompt_tokens"),
        "completion_tokens": usage.get("completion_tokens"),
        "usage": json.dumps(usage) if usage else None,
    }


def agent_of(data: dict[str, Any]) -> str | None:
    """The call's agent: a tag the agent set (the event's ``agent``, else the request's
    ``metadata.agent``), else the model it asked for (1.0 records no agent spans)."""
    request = data.get("request")
    request = request if isinstance(request, dict) else {}
    metadata = request.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    for tag in (data.get("agent"), metadata.get("agent"), data.get("model"), request.get("model")):
        if isinstance(tag, str):
            return tag
    return None


def reject_reason(fields: dict[str, Any]) -> str | None:
    """Why 1.0 would not train on a call (None when it would), before de-duplication."""
    if fields["status"] == "error":
        return "error_status"
    if fields["http_status"] is not None and fields["http_status"] >= 400:
        return "http_error"
    if not fields["prompt_token_ids"]:
        return "no_prompt_ids"
    if not fields["response_token_ids"]:
        return "no_response_ids"
    return None


def reward_fields(data: dict[str, Any]) -> dict[str, Any]:
    """The typed fields of one ``reward`` event's data (a non-number value becomes null)."""
    value = data.get("value")
    number = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    return {
        "value": number,
        "raw_value": json.dumps(value),
        "message": data.get("message"),
        "source": data.get("source"),
        "reason": data.get("reason"),
    }


def message_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The chat messages of one call: the request's, then the response's first choice."""
    rows: list[dict[str, Any]] = []
    request = data.get("request")
    request = request if isinstance(request, dict) else {}
    tools = _json_list(request.get("tools"))
    for index, message in enumerate(request.get("messages") or []):
        if isinstance(message, dict):
            rows.append(_message("input", index, message, tools))
    response = data.get("response")
    response = response if isinstance(response, dict) else {}
    choices = response.get("choices") or []
    if choices and isinstance(choices[0], dict) and isinstance(choices[0].get("message"), dict):
        rows.append(_message("output", 0, choices[0]["message"], tools))
    return rows


def _message(direction: str, index: int, message: dict[str, Any], tools: str | None) -> dict[str, Any]:
    """One ``messages`` row; 1.0 records OpenAI-format messages, so tool fields are taken as they are."""
    content = message.get("content")
    if not isinstance(content, str):
        content = None if content is None else json.dumps(content)
    tool_call_id = message.get("tool_call_id")
    return {
        "direction": direction,
        "message_index": index,
        "role": message.get("role"),
        "content": content,
        "tool_calls": _json_list(message.get("tool_calls")),
        "tool_call_id": tool_call_id if isinstance(tool_call_id, str) else None,
        "tools": tools,
    }


def _json_list(value: Any) -> str | None:
    """A non-empty list as JSON text (the 0.3 silver's encoding of tool_calls and tools), else None."""
    return json.dumps(value) if isinstance(value, list) and value else None


def _rollout_context(rollouts: pa.Table) -> dict[str, tuple[str | None, bool | None]]:
    """rollout_id -> (data_id, is_train) as 1.0 derives them: ``input.data_id``, else ``instance_id``."""
    out: dict[str, tuple[str | None, bool | None]] = {}
    for rid, text, mode in zip(
        rollouts.column("rollout_id").to_pylist(),
        rollouts.column("input").to_pylist(),
        rollouts.column("mode").to_pylist(),
        strict=True,
    ):
        value = json.loads(text) if text else None
        data_id = None
        if isinstance(value, dict):
            data_id = str(value.get("data_id") or value.get("instance_id") or "") or None
        out[rid] = (data_id, None if mode is None else mode == "train")
    return out


def silver_from_events(
    events: pa.Table, rollouts: pa.Table, collection_id: str, first_index: int = 0
) -> dict[str, pa.Table]:
    """The three silver tables of a 1.0 collection's bronze ``events`` (the whole table, or one of its
    files: each holds whole attempts) and its ``rollouts``; ``first_index``: the events' place in the
    collection (the rows of the files before)."""
    context = _rollout_context(rollouts)
    calls: list[dict[str, Any]] = []
    rewards: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    ordered = events.sort_by(
        [("rollout_id", "ascending"), ("attempt_id", "ascending"), ("position", "ascending")]
    )
    # span_index: the event's place in the collection, the order 0.3's silver rows carry too
    for span_index, event in enumerate(ordered.to_pylist(), start=first_index):
        kind = event["event_type"]
        if kind not in (MODEL_REQUEST, REWARD):
            continue
        data = json.loads(event["data"]) if event["data"] else {}
        data = data if isinstance(data, dict) else {}
        rid, aid, position = event["rollout_id"], event["attempt_id"], event["position"]
        where = {
            "collection_id": collection_id,
            "rollout_id": rid,
            "attempt_id": aid,
            "span_id": event_id(rid, aid, position),
            "sequence_id": position,
            "start_time": event["timestamp"],
            "span_index": span_index,
        }
        if kind == REWARD:
            fields = reward_fields(data)
            rewards.append(
                {
                    **where,
                    "span_name": REWARD_SPAN_NAME,
                    "name": "primary",
                    "value": fields["value"],
                    "source": "agl1",
                    "message": fields["message"],
                    "reported_by": fields["source"],
                    "reason": fields["reason"],
                    "reject_reason": None if fields["value"] is not None else "not_a_number",
                }
            )
            continue
        fields = call_fields(data)
        prompt, response = fields["prompt_token_ids"] or [], fields["response_token_ids"] or []
        data_id, is_train = context.get(rid, (None, None))
        calls.append(
            {
                **where,
                **fields,
                "span_name": CALL_SPAN_NAME,
                "prompt_token_ids": prompt,
                "response_token_ids": response,
                "prompt_len": len(prompt),
                "response_len": len(response),
                "reject_reason": reject_reason(fields),
                "token_source": ENGINE if prompt and response else TEXT,
                "source": "agl1",
                "data_id": data_id,
                "is_train": is_train,
                "agent": agent_of(data),
            }
        )
        messages += [{**where, **row} for row in message_rows(data)]
    index = [pa.field("span_index", pa.int64())]
    return {
        "llm_calls": _table(calls, pa.schema([*schemas.LLM_CALLS, *index])),
        "rewards": _table(
            rewards, pa.schema([*schemas.REWARDS, pa.field("reject_reason", pa.string()), *index])
        ),
        "messages": _table(messages, pa.schema([*schemas.MESSAGES, *index])),
    }


def _table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    columns = {f.name: pa.array([r.get(f.name) for r in rows], type=f.type) for f in schema}
    return pa.table(columns, schema=schema)
