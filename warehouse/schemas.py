"""Arrow schemas of every table in the warehouse.

Bronze tables keep what the store returned (JSON-valued fields as JSON text,
so nothing is lost); silver tables hold typed, parsed fields; gold tables are
the rows a trainer reads. Writers cast to these schemas so every file of a
table has the same types, and empty views still have the right columns.
"""

from __future__ import annotations

import pyarrow as pa

TOKENS = pa.list_(pa.int32())

ROLLOUTS = pa.schema(
    [
        ("collection_id", pa.string()),
        ("rollout_id", pa.string()),
        ("input", pa.string()),  # JSON
        ("start_time", pa.float64()),
        ("end_time", pa.float64()),
        ("mode", pa.string()),
        ("resources_id", pa.string()),
        ("status", pa.string()),
        ("config", pa.string()),  # JSON
        ("metadata", pa.string()),  # JSON
    ]
)

ATTEMPTS = pa.schema(
    [
        ("collection_id", pa.string()),
        ("rollout_id", pa.string()),
        ("attempt_id", pa.string()),
        ("sequence_id", pa.int64()),
        ("start_time", pa.float64()),
        ("end_time", pa.float64()),
        ("status", pa.string()),
        ("worker_id", pa.string()),
        ("last_heartbeat_time", pa.float64()),
        ("metadata", pa.string()),  # JSON
    ]
)

SPANS = pa.schema(
    [
        ("collection_id", pa.string()),
        ("rollout_id", pa.string()),
        ("attempt_id", pa.string()),
        ("sequence_id", pa.int64()),
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("parent_id", pa.string()),
        ("name", pa.string()),
        ("status", pa.string()),  # JSON {status_code, description}
        ("attributes", pa.string()),  # JSON, whole (redacted unless --no-redact)
        ("events", pa.string()),  # JSON
        ("links", pa.string()),  # JSON
        ("start_time", pa.float64()),
        ("end_time", pa.float64()),
        ("context", pa.string()),  # JSON
        ("parent", pa.string()),  # JSON
        ("resource", pa.string()),  # JSON
    ]
)

# Agent Lightning 1.0 records events, not spans: one row per event, in order. An event has
# no id; (rollout_id, attempt_id, position) is its identity. ``data`` is its JSON, whole.
EVENTS = pa.schema(
    [
        ("collection_id", pa.string()),
        ("rollout_id", pa.string()),
        ("attempt_id", pa.string()),
        ("position", pa.int64()),
        ("event_type", pa.string()),
        ("timestamp", pa.float64()),
        ("data", pa.string()),  # JSON, whole (redacted unless --no-redact)
    ]
)

LLM_CALLS = pa.schema(
    [
        ("collection_id", pa.string()),
        ("rollout_id", pa.string()),
        ("attempt_id", pa.string()),
        ("span_id", pa.string()),
        ("span_name", pa.string()),
        ("sequence_id", pa.int64()),
        ("start_time", pa.float64()),
        ("response_id", pa.string()),
        ("model", pa.string()),
        ("prompt_token_ids", TOKENS),
        ("response_token_ids", TOKENS),
        ("prompt_len", pa.int32()),
        ("response_len", pa.int32()),
        ("reject_reason", pa.string()),  # null when the call is usable
        # What Agent Lightning 1.0 records with each call (null for 0.3 spans):
        ("source", pa.string()),  # agl03 (spans) | agl1 (events)
        ("model_version", pa.int64()),  # the policy step that served the call
        ("data_id", pa.string()),  # groups a task's sibling rollouts
        ("is_train", pa.bool_()),
        ("response_logprobs", pa.list_(pa.float64())),  # chosen-token logprobs, when requested
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("usage", pa.string()),  # JSON
        ("finish_reason", pa.string()),
        ("latency_ms", pa.float64()),
        ("http_status", pa.int32()),
        ("status", pa.string()),  # ok | error
        ("retry_count", pa.int32()),
    ]
)

REWARDS = pa.schema(
    [
        ("collection_id", pa.string()),
        ("rollout_id", pa.string()),
        ("attempt_id", pa.string()),
        ("span_id", pa.string()),
        ("span_name", pa.string()),
        ("sequence_id", pa.int64()),
        ("start_time", pa.float64()),
        ("name", pa.string()),
        ("value", pa.float64()),
        ("source", pa.string()),  # agentlightning | agentops | agl1
        ("message", pa.string()),  # 1.0 reward events: explanation, who reported it, why
        ("reported_by", pa.string()),
        ("reason", pa.string()),
    ]
)

MESSAGES = pa.schema(
    [
        ("collection_id", pa.string()),
        ("rollout_id", pa.string()),
        ("attempt_id", pa.string()),
        ("span_id", pa.string()),  # the litellm_request span of the call
        ("sequence_id", pa.int64()),
        ("direction", pa.string()),  # input | output
        ("message_index", pa.int32()),
        ("role", pa.string()),
        ("content", pa.string()),
        ("tool_calls", pa.string()),  # JSON, OpenAI format: [{id, type, function: {name, arguments}}]
        ("tool_call_id", pa.string()),  # on a tool result: the call it answers
        ("tools", pa.string()),  # JSON, OpenAI format: the request's tool definitions
    ]
)

DATASET_ROWS = pa.schema(
    [
        ("input_ids", TOKENS),
        ("attention_mask", TOKENS),
        ("labels", TOKENS),
        ("reward", pa.float64()),
        ("rollout_id", pa.string()),
        ("attempt_id", pa.string()),
        ("span_id", pa.string()),
    ]
)

#: A --kind preference version's rows: a prompt, a better and a worse continuation of it (token ids;
#: labels -100 where a continuation is not trained, such as tool output between turns).
PREFERENCE_ROWS = pa.schema(
    [
        ("task", pa.string()),
        ("prompt_input_ids", TOKENS),
        ("chosen_input_ids", TOKENS),
        ("chosen_labels", TOKENS),
        ("rejected_input_ids", TOKENS),
        ("rejected_labels", TOKENS),
        ("chosen_reward", pa.float64()),
        ("rejected_reward", pa.float64()),
        ("chosen_rollout_id", pa.string()),
        ("rejected_rollout_id", pa.string()),
    ]
)

#: A reward layer's scores (tracebank rescore): one row per archived rollout scored; ``score`` is null
#: when the scorer returned None or failed, ``error`` the first line of its failure.
REWARD_SCORES = pa.schema(
    [
        ("collection_id", pa.string()),
        ("rollout_id", pa.string()),
        ("attempt_id", pa.string()),
        ("score", pa.float64()),
        ("error", pa.string()),
    ]
)

BRONZE = {"rollouts": ROLLOUTS, "attempts": ATTEMPTS, "spans": SPANS, "events": EVENTS}
SILVER = {"llm_calls": LLM_CALLS, "rewards": REWARDS, "messages": MESSAGES}


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Reorder and cast ``table``'s columns to ``schema`` (extra columns are kept last)."""
    cols = []
    for field in schema:
        if field.name in table.column_names:
            cols.append(table.column(field.name).cast(field.type))
        else:
            cols.append(pa.nulls(table.num_rows, field.type))
    extra = [n for n in table.column_names if n not in schema.names]
    names = schema.names + extra
    return pa.Table.from_arrays(cols + [table.column(n) for n in extra], names=names)
