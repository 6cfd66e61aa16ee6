"""Agent Lightning 1.0 parity: the rows 1.0's trainer builds from a rollout (``RolloutAdapter``).

1.0 turns a finished rollout into training rows in three places, reproduced here
in order from a rollout's calls (its ``model_request`` events, in event order)
and its reward values:

1. the server's triplet view (``GET .../events?format=triplet``): prompt ids from
   the response's top-level ``prompt_token_ids`` (else ``choices[0]``), response
   ids from ``choices[0].token_ids``; calls with identical prompt ids are
   de-duplicated keeping the **last** (before any other filter; calls without a
   valid id list are never merged);
2. the rollout manager: drop calls with ``status == "error"``, HTTP status >= 400
   or no response ids; the last reward event's value (a number, not a bool) is the
   rollout's reward, ``reward_fillna_value`` when there is none;
3. ``RolloutAdapter.get_train_data_batch``: ``transition`` keeps one row per call;
   ``trajectory`` merges a call into the previous row when its prompt starts with
   the previous prompt + response, the tokens in between (the environment's
   observation) masked out; prompts longer than ``max_prompt_length`` are cut and
   the row marked for drop (the trainer masks it out), responses cut to
   ``max_response_length`` (and ``max_total_length`` - prompt), rows with no
   trainable token skipped.

With ``trajectory``, a call that does not extend the row before it is logged the way 1.0 logs it
to W&B (``training/trace_merge_mismatches``): its turn, lengths and reason; 1.0.2 classifies every
token-prefix failure as ``others_mismatch`` (its ``template_mismatch`` and ``retoken_mismatch``
columns are never set). tracebank adds where the prompt first differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from tracebank.transform.config import Agl1Limits
from tracebank.warehouse import finite
from tracebank.warehouse.contract import IGNORE_INDEX


@dataclass(frozen=True)
class Agl1Call:
    """One ``model_request`` event, as the rules read it."""

    prompt_ids: list[int] | None
    response_ids: list[int] | None
    log_probs: list[float] | None = None
    status: str | None = None
    http_status: int | None = None
    span_id: str | None = None


#: The reasons 1.0's RolloutAdapter gives a call it could not merge (its W&B table's flags).
MISMATCH_REASONS = ("template_mismatch", "retoken_mismatch", "others_mismatch")
#: What 1.0.2 says of every call whose prompt does not start with the context before it.
PREFIX_MISMATCH = "others_mismatch"


@dataclass(frozen=True)
class MergeMismatch:
    """A call that starts a new row because its prompt does not extend the context before it."""

    turn_index: int
    """Its place among the rollout's calls 1.0 trains on (1.0's ``turn_index``)."""
    span_id: str | None
    reason: str
    first_diff_position: int
    """The first position where its prompt and the previous context differ (the shorter length
    when one is a prefix of the other)."""
    prompt_length: int
    response_length: int
    previous_trace_length: int
    current_trace_length: int


def first_difference(context: Sequence[int], prompt: Sequence[int]) -> int:
    """Where ``prompt`` first differs from ``context`` (the shorter length when one starts the other)."""
    n = min(len(context), len(prompt))
    differ = np.flatnonzero(np.asarray(context[:n], np.int64) != np.asarray(prompt[:n], np.int64))
    return int(differ[0]) if len(differ) else n


@dataclass(frozen=True)
class Agl1Row:
    """One training row as RolloutAdapter builds it (unpadded)."""

    turn_index: int
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    log_probs: list[float] | None
    reward: float
    dropped: bool
    """The prompt was longer than the limit: 1.0 keeps the row out of training."""


def _valid_ids(ids: Any) -> bool:
    return isinstance(ids, list) and bool(ids) and all(type(i) is int for i in ids)


def triplet_calls(calls: list[Agl1Call]) -> list[Agl1Call]:
    """The calls 1.0 trains on: de-duplicated by prompt ids (last wins), then filtered."""
    last_by_prompt: dict[tuple[int, ...], int] = {}
    kept: set[int] = set()
    for index, call in enumerate(calls):
        if _valid_ids(call.prompt_ids):
            last_by_prompt[tuple(call.prompt_ids or ())] = index
        else:
            kept.add(index)
    kept.update(last_by_prompt.values())
    return [
        call
        for index, call in enumerate(calls)
        if index in kept
        and call.status != "error"
        and not (isinstance(call.http_status, int) and call.http_status >= 400)
        and call.response_ids
    ]


def final_reward(values: list[Any]) -> float | None:
    """The last reward event's value when it is a number (1.0 ignores bools and anything else)."""
    if not values:
        return None
    value = values[-1]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    # a NaN, an infinity or a number beyond the bound (a planted silver table) is no usable reward
    return None if finite.reward_problem(float(value)) else float(value)


def _limited_row(
    limits: Agl1Limits,
    turn_index: int,
    prompt: list[int],
    response: list[int],
    mask: list[int],
    log_probs: list[float] | None,
    reward: float,
) -> Agl1Row | None:
    dropped = len(prompt) > limits.max_prompt_length
    prompt = prompt[: limits.max_prompt_length]
    limit = limits.max_response_length
    if limits.max_total_length is not None:
        limit = min(limit, max(limits.max_total_length - len(prompt), 0))
    response, mask = response[:limit], mask[:limit]
    if log_probs is not None:
        log_probs = log_probs[:limit]
        if len(log_probs) != len(response):
            log_probs = None
    if sum(mask) == 0:
        return None
    return Agl1Row(turn_index, prompt, response, mask, log_probs, reward, dropped)


def rollout_rows(
    calls: list[Agl1Call],
    reward_values: list[Any],
    limits: Agl1Limits,
    mismatches: list[MergeMismatch] | None = None,
) -> list[Agl1Row]:
    """The rows of one rollout (its calls in event order, its reward event values in order); with
    ``trajectory``, each call that could not be merged is appended to ``mismatches`` when given."""
    reward = final_reward(reward_values)
    reward = limits.reward_fillna_value if reward is None else reward
    usable = triplet_calls(calls)
    rows: list[Agl1Row | None] = []
    if limits.level == "transition":
        for turn, call in enumerate(usable):
            response = list(call.response_ids or [])
            rows.append(
                _limited_row(
                    limits,
                    turn,
                    list(call.prompt_ids or []),
                    response,
                    [1] * len(response),
                    call.log_probs,
                    reward,
                )
            )
        return [row for row in rows if row is not None]
    group: _Group | None = None
    for turn, call in enumerate(usable):
        if group is not None and group.extend(call):
            continue
        if group is not None:
            rows.append(group.row(limits, reward))
            if mismatches is not None:
                mismatches.append(group.mismatch(turn, call))
        group = _Group.start(turn, call)
    if group is not None:
        rows.append(group.row(limits, reward))
    return [row for row in rows if row is not None]


@dataclass
class _Group:
    """A trajectory row being merged: calls whose prompts extend the previous context."""

    turn_index: int
    prompt: list[int]
    response: list[int]
    mask: list[int]
    log_probs: list[float] | None
    context: list[int]

    @classmethod
    def start(cls, turn: int, call: Agl1Call) -> _Group:
        prompt, response = list(call.prompt_ids or []), list(call.response_ids or [])
        log_probs = list(call.log_probs) if call.log_probs is not None else None
        return cls(turn, prompt, response, [1] * len(response), log_probs, prompt + response)

    def extend(self, call: Agl1Call) -> bool:
        """Merge ``call`` when its prompt starts with the context so far; False when it does not."""
        prompt, response = list(call.prompt_ids or []), list(call.response_ids or [])
        if prompt[: len(self.context)] != self.context:
            return False
        observation = prompt[len(self.context) :]
        self.response += observation + response
        self.mask += [0] * len(observation) + [1] * len(response)
        if self.log_probs is not None:
            if call.log_probs is None or len(call.log_probs) != len(response):
                self.log_probs = None
            else:
                self.log_probs += [0.0] * len(observation) + list(call.log_probs)
        self.context = prompt + response
        return True

    def mismatch(self, turn: int, call: Agl1Call) -> MergeMismatch:
        """What 1.0 logs of ``call`` (turn ``turn``), which :meth:`extend` refused."""
        prompt, response = list(call.prompt_ids or []), list(call.response_ids or [])
        return MergeMismatch(
            turn,
            call.span_id,
            PREFIX_MISMATCH,
            first_difference(self.context, prompt),
            len(prompt),
            len(response),
            len(self.context),
            len(prompt) + len(response),
        )

    def row(self, limits: Agl1Limits, reward: float) -> Agl1Row | None:
        return _limited_row(
            limits, self.turn_index, self.prompt, self.response, self.mask, self.log_probs, reward
        )


def calls_by_attempt(calls: pa.Table) -> dict[tuple[str, str], list[Agl1Call]]:
    """1.0 calls of each (rollout, attempt), in event order, from silver ``llm_calls`` rows."""
    columns = ["rollout_id", "attempt_id", "sequence_id", "prompt_token_ids", "response_token_ids"]
    columns += ["response_logprobs", "status", "http_status", "span_id"]
    ordered = calls.select(columns).sort_by(
        [("rollout_id", "ascending"), ("attempt_id", "ascending"), ("sequence_id", "ascending")]
    )
    out: dict[tuple[str, str], list[Agl1Call]] = {}
    for r in ordered.to_pylist():
        call = Agl1Call(
            r["prompt_token_ids"],
            r["response_token_ids"],
            r["response_logprobs"],
            r["status"],
            r["http_status"],
            r["span_id"],
        )
        out.setdefault((r["rollout_id"], r["attempt_id"]), []).append(call)
    return out


def rewards_by_attempt(rewards: pa.Table) -> dict[tuple[str, str], list[Any]]:
    """Reward values of each (rollout, attempt) in event order (null where the value was not a number)."""
    ordered = rewards.select(["rollout_id", "attempt_id", "sequence_id", "value"]).sort_by(
        [("rollout_id", "ascending"), ("attempt_id", "ascending"), ("sequence_id", "ascending")]
    )
    out: dict[tuple[str, str], list[Any]] = {}
    for r in ordered.to_pylist():
        out.setdefault((r["rollout_id"], r["attempt_id"]), []).append(r["value"])
    return out


def token_row(row: Agl1Row) -> dict[str, Any]:
    """A gold row: the response tokens 1.0 trains on (mask 1) are labelled, prompt and observations -100."""
    labels = [IGNORE_INDEX] * len(row.prompt_ids)
    labels += [
        tok if keep else IGNORE_INDEX for tok, keep in zip(row.response_ids, row.response_mask, strict=True)
    ]
    input_ids = row.prompt_ids + row.response_ids
    return {
        "input_ids": input_ids,
        "attention_mask": [1] * len(input_ids),
        "labels": labels,
        "reward": row.reward,
    }
