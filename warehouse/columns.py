"""The columns of every warehouse table: the data contract's one list of names and types.

Bronze tables keep what the store returned (JSON-valued fields as JSON text, so nothing is lost);
silver tables hold typed, parsed fields; gold tables are the rows a trainer reads. Types are
written in a small notation (``string``, ``int32``, ``int64``, ``float64``, ``bool``,
``list<T>``) with the standard library only, so `tracebank sql` can declare a table's columns
without importing pyarrow; :mod:`schemas` turns them into the Arrow schemas writers cast to.
"""

from __future__ import annotations

#: A table's columns in order: (name, type) pairs.
Columns = tuple[tuple[str, str], ...]


ROLLOUTS: Columns = (
    ("collection_id", "string"),
    ("rollout_id", "string"),
    ("input", "string"),  # JSON
    ("start_time", "float64"),
    ("end_time", "float64"),
    ("mode", "string"),
    ("resources_id", "string"),
    ("status", "string"),
    ("config", "string"),  # JSON
    ("metadata", "string"),  # JSON
)

ATTEMPTS: Columns = (
    ("collection_id", "string"),
    ("rollout_id", "string"),
    ("attempt_id", "string"),
    ("sequence_id", "int64"),
    ("start_time", "float64"),
    ("end_time", "float64"),
    ("status", "string"),
    ("worker_id", "string"),
    ("last_heartbeat_time", "float64"),
    ("metadata", "string"),  # JSON
)

SPANS: Columns = (
    ("collection_id", "string"),
    ("rollout_id", "string"),
    ("attempt_id", "string"),
    ("sequence_id", "int64"),
    ("trace_id", "string"),
    ("span_id", "string"),
    ("parent_id", "string"),
    ("name", "string"),
    ("status", "string"),  # JSON {status_code, description}
    ("attributes", "string"),  # JSON, whole (redacted unless --no-redact)
    ("events", "string"),  # JSON
    ("links", "string"),  # JSON
    ("start_time", "float64"),
    ("end_time", "float64"),
    ("context", "string"),  # JSON
    ("parent", "string"),  # JSON
    ("resource", "string"),  # JSON
)

# Agent Lightning 1.0 records events, not spans: one row per event, in order. An event has
# no id; (rollout_id, attempt_id, position) is its identity. ``data`` is its JSON, whole.
EVENTS: Columns = (
    ("collection_id", "string"),
    ("rollout_id", "string"),
    ("attempt_id", "string"),
    ("position", "int64"),
    ("event_type", "string"),
    ("timestamp", "float64"),
    ("data", "string"),  # JSON, whole (redacted unless --no-redact)
)

LLM_CALLS: Columns = (
    ("collection_id", "string"),
    ("rollout_id", "string"),
    ("attempt_id", "string"),
    ("span_id", "string"),
    ("span_name", "string"),
    ("sequence_id", "int64"),
    ("start_time", "float64"),
    ("response_id", "string"),
    ("model", "string"),
    ("prompt_token_ids", "list<int32>"),
    ("response_token_ids", "list<int32>"),
    ("prompt_len", "int32"),
    ("response_len", "int32"),
    ("reject_reason", "string"),  # null when the call is usable
    # What Agent Lightning 1.0 records with each call (null for 0.3 spans):
    ("source", "string"),  # agl03 (spans) | agl1 (events)
    ("model_version", "int64"),  # the policy step that served the call
    ("data_id", "string"),  # groups a task's sibling rollouts
    ("is_train", "bool"),
    ("response_logprobs", "list<float64>"),  # chosen-token logprobs, when requested
    ("prompt_tokens", "int64"),
    ("completion_tokens", "int64"),
    ("usage", "string"),  # JSON
    ("finish_reason", "string"),
    ("latency_ms", "float64"),
    ("http_status", "int32"),
    ("status", "string"),  # ok | error
    ("retry_count", "int32"),
    ("token_source", "string"),  # engine: the served ids were recorded | text: only the text was
    # The agent that made the call: 0.3 spans, the enclosing agent span's name as upstream's
    # TracerTraceToTriplet names it; 1.0 events, the agent's own tag, else the request's model.
    ("agent", "string"),
)

REWARDS: Columns = (
    ("collection_id", "string"),
    ("rollout_id", "string"),
    ("attempt_id", "string"),
    ("span_id", "string"),
    ("span_name", "string"),
    ("sequence_id", "int64"),
    ("start_time", "float64"),
    ("name", "string"),
    ("value", "float64"),
    ("source", "string"),  # agentlightning | agentops | agl1
    ("message", "string"),  # 1.0 reward events: explanation, who reported it, why
    ("reported_by", "string"),
    ("reason", "string"),
)

MESSAGES: Columns = (
    ("collection_id", "string"),
    ("rollout_id", "string"),
    ("attempt_id", "string"),
    ("span_id", "string"),  # the litellm_request span of the call
    ("sequence_id", "int64"),
    ("direction", "string"),  # input | output
    ("message_index", "int32"),
    ("role", "string"),
    ("content", "string"),
    ("tool_calls", "string"),  # JSON, OpenAI format: [{id, type, function: {name, arguments}}]
    ("tool_call_id", "string"),  # on a tool result: the call it answers
    ("tools", "string"),  # JSON, OpenAI format: the request's tool definitions
)

DATASET_ROWS: Columns = (
    ("input_ids", "list<int32>"),
    ("attention_mask", "list<int32>"),
    ("labels", "list<int32>"),
    ("reward", "float64"),
    ("rollout_id", "string"),
    ("attempt_id", "string"),
    ("span_id", "string"),
)

#: A --kind preference version's rows: a prompt, a better and a worse continuation of it (token ids;
#: labels -100 where a continuation is not trained, such as tool output between turns).
PREFERENCE_ROWS: Columns = (
    ("task", "string"),
    ("prompt_input_ids", "list<int32>"),
    ("chosen_input_ids", "list<int32>"),
    ("chosen_labels", "list<int32>"),
    ("rejected_input_ids", "list<int32>"),
    ("rejected_labels", "list<int32>"),
    ("chosen_reward", "float64"),
    ("rejected_reward", "float64"),
    ("chosen_rollout_id", "string"),
    ("rejected_rollout_id", "string"),
)

#: A reward layer's scores (tracebank rescore): one row per archived rollout scored; ``score`` is null
#: when the scorer returned None or failed, ``error`` the first line of its failure.
REWARD_SCORES: Columns = (
    ("collection_id", "string"),
    ("rollout_id", "string"),
    ("attempt_id", "string"),
    ("score", "float64"),
    ("error", "string"),
    ("samples", "list<float64>"),  # rescore --judge --samples N: each sampled judgment
    ("samples_mean", "float64"),
    ("samples_std", "float64"),  # population standard deviation of the samples
)

BRONZE = {"rollouts": ROLLOUTS, "attempts": ATTEMPTS, "spans": SPANS, "events": EVENTS}
SILVER = {"llm_calls": LLM_CALLS, "rewards": REWARDS, "messages": MESSAGES}

#: A merged dataset version's calls that could not be merged into the row before them (one row each):
#: ``reason`` as Agent Lightning 1.0's RolloutAdapter classifies it (``template_mismatch``,
#: ``retoken_mismatch``, ``others_mismatch``; 1.0.2 classifies every token-prefix failure as the last),
#: or ``reward_break`` (recipe rules: same tokens, another reward); ``first_diff_position`` is where
#: the call's prompt first differs from the previous context (its length when it is a strict prefix);
#: ``turn_index`` the call's place among its rollout's merged calls; lengths as 1.0 logs them.
MERGE_DIAGNOSTICS: Columns = (
    ("collection_id", "string"),
    ("rollout_id", "string"),
    ("attempt_id", "string"),
    ("span_id", "string"),
    ("turn_index", "int32"),
    ("reason", "string"),
    ("first_diff_position", "int64"),
    ("prompt_length", "int64"),
    ("response_length", "int64"),
    ("previous_trace_length", "int64"),
    ("current_trace_length", "int64"),
)
