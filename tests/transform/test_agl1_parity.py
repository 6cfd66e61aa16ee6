"""1.0 parity: rows via spool, bronze, silver and the rules equal RolloutAdapter's on the same rollouts."""

from __future__ import annotations

from collections import Counter

import pytest
from tracebank.collect.agl1_bronze import bronze_tables
from tracebank.collect.agl1_silver import silver_from_events
from tracebank.collect.agl1_spool import read_spool
from tracebank.collect.redact import Redactor
from tracebank.transform.agl1_build import agl1_rows_table, mismatch_counts
from tracebank.transform.agl1_rows import MISMATCH_REASONS, calls_by_attempt, rewards_by_attempt, rollout_rows
from tracebank.transform.config import Agl1Limits

from tests.transform.agl1_oracle import rollout_adapter_rows

LIMITS = [
    Agl1Limits(level="trajectory"),
    Agl1Limits(level="transition"),
    Agl1Limits(level="trajectory", max_prompt_length=30, max_response_length=12),
    Agl1Limits(level="transition", max_prompt_length=30, max_response_length=12, max_total_length=35),
    Agl1Limits(level="trajectory", max_prompt_length=64, max_response_length=64, max_total_length=20),
    Agl1Limits(level="trajectory", reward_fillna_value=-1.0),
]


def silver_of(spool) -> dict:
    """The round's spool as bronze (with redaction, as collect writes it), then silver."""
    tables = bronze_tables(read_spool(spool), "c1", Redactor())
    return silver_from_events(tables["events"], tables["rollouts"], "c1")


def tracebank_rows(silver: dict, limits: Agl1Limits) -> list[tuple]:
    calls, rewards = calls_by_attempt(silver["llm_calls"]), rewards_by_attempt(silver["rewards"])
    return [
        (
            rid,
            r.turn_index if limits.level == "transition" else None,
            tuple(r.prompt_ids),
            tuple(r.response_ids),
            tuple(r.response_mask) if limits.level == "trajectory" else None,
            tuple(r.log_probs) if r.log_probs is not None else None,
            r.reward,
            r.dropped,
        )
        for (rid, aid), attempt_calls in calls.items()
        for r in rollout_rows(attempt_calls, rewards.get((rid, aid), []), limits)
    ]


def oracle_rows(completed: list[dict], limits: Agl1Limits) -> list[tuple]:
    rows = rollout_adapter_rows(
        completed,
        max_prompt_length=limits.max_prompt_length,
        max_response_length=limits.max_response_length,
        max_total_length=limits.max_total_length,
        reward_fillna_value=limits.reward_fillna_value,
        trace_aggregator_level=limits.level,
    )
    # data_id is left out: the 1.0 trainer invents it per sample and never sends it to the server
    return [
        (
            r.rollout_id,
            r.turn_index,
            r.prompt_ids,
            r.response_ids,
            r.response_mask,
            r.response_log_probs,
            r.reward,
            r.is_drop,
        )
        for r in rows
    ]


@pytest.mark.parametrize(
    "limits", LIMITS, ids=lambda lim: f"{lim.level}-{lim.max_prompt_length}-{lim.max_total_length}"
)
def test_rows_equal_rollout_adapter_rows(agl1_round, limits):
    spool, result, _ = agl1_round
    ours = tracebank_rows(silver_of(spool), limits)
    expected = oracle_rows(result["completed"], limits)
    assert Counter(ours) == Counter(expected)
    assert len(expected) >= 10


def test_the_round_exercises_every_rule(agl1_round):
    """The comparison above would be weak if the round never hit a rule: check that it does."""
    spool, result, _ = agl1_round
    traj = oracle_rows(
        result["completed"], Agl1Limits(level="trajectory", max_prompt_length=30, max_response_length=12)
    )
    assert any(r[7] for r in traj)  # a prompt over the limit, dropped
    assert any(0 in r[4] for r in traj)  # a merged row with a masked observation
    assert any(r[5] is not None and 0.0 in r[5] for r in traj)  # merged logprobs
    assert any(r[6] == 0.0 for r in traj) and any(
        r[6] == 0.1 for r in traj
    )  # fill-in, last reward (0.9 then 0.1)
    transition = oracle_rows(result["completed"], Agl1Limits(level="transition"))
    assert len(transition) > len(oracle_rows(result["completed"], Agl1Limits(level="trajectory")))


@pytest.mark.parametrize("level", ["trajectory", "transition"])
def test_token_rows_label_what_10_trains_on(agl1_round, level):
    spool, result, _ = agl1_round
    silver = silver_of(spool)
    limits = Agl1Limits(level=level, max_prompt_length=30, max_response_length=12)
    table, counts = agl1_rows_table([("c1", silver["llm_calls"], silver["rewards"])], limits, seed=3)
    expected = Counter()
    for r in oracle_rows(result["completed"], limits):
        if r[7]:  # 1.0 masks rows with an over-long prompt out of training
            continue
        mask = r[4] or (1,) * len(r[3])
        labels = (-100,) * len(r[2]) + tuple(t if m else -100 for t, m in zip(r[3], mask, strict=True))
        expected[(r[2] + r[3], labels, r[6])] += 1
    got = Counter(
        (tuple(row["input_ids"]), tuple(row["labels"]), row["reward"])
        for row in table.select(["input_ids", "labels", "reward"]).to_pylist()
    )
    assert got == expected
    assert counts["rows"] == table.num_rows and counts["dropped_long_prompt"] > 0
    assert all(set(m) == {1} for m in table.column("attention_mask").to_pylist())


def test_merge_diagnostics_equal_what_rollout_adapter_logs(agl1_round):
    """The calls 1.0's trajectory merging could not merge, per reason and per rollout, as it logs them."""
    spool, result, _ = agl1_round
    silver = silver_of(spool)
    limits = Agl1Limits(level="trajectory")
    found: list[dict] = []
    agl1_rows_table([("c1", silver["llm_calls"], silver["rewards"])], limits, seed=0, diagnostics=found)
    logged: list[dict] = []
    metrics: dict[str, int] = {}
    rollout_adapter_rows(
        result["completed"],
        max_prompt_length=limits.max_prompt_length,
        max_response_length=limits.max_response_length,
        trace_aggregator_level="trajectory",
        merge_mismatch_rows=logged,
        metrics=metrics,
    )
    counts = mismatch_counts(found)
    assert counts == {
        "template_mismatch": sum(r["template_mismatch"] for r in logged),
        "retoken_mismatch": sum(r["retoken_mismatch"] for r in logged),
        "others_mismatch": sum(r["others_mismatch"] for r in logged),
        "rollouts": metrics["training/n_unmerged_rollouts"],
    }
    assert sum(counts[r] for r in MISMATCH_REASONS) == metrics["training/n_trace_merge_mismatch_rows"] > 0
    keys = ["rollout_id", "turn_index", "prompt_length", "response_length"]
    keys += ["previous_trace_length", "current_trace_length"]
    ours = Counter(tuple(d[k] for k in keys) for d in found)
    assert ours == Counter(tuple(r[k] for k in keys) for r in logged)
