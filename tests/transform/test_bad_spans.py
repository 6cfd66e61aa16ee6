"""Bad spans exclude their call or reward with a counted reason; the run still commits."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow.parquet as pq
from tracebank.transform import TransformConfig, transform
from tracebank.warehouse.query import run_sql

from tests.fixtures.bronze import commit_collection
from tests.fixtures.proxy_spans import Call, call_spans, plain_span, reward_span
from tests.transform.oracle import Scenario, oracle_rows, row_key


def _raw(r, a, seq, prompt_text, response_ids_text, rid):
    choices = (
        "[{'index': 0, 'message': {'role': 'assistant', 'content': 'x'}, "
        f"'token_ids': {response_ids_text}}}]"
    )
    return plain_span(
        r,
        a,
        seq,
        "raw_gen_ai_request",
        {
            "llm.hosted_vllm.id": rid,
            "llm.hosted_vllm.prompt_token_ids": prompt_text,
            "llm.hosted_vllm.choices": choices,
        },
        float(seq),
    )


def _bad_scenario():
    sc = Scenario()
    r, a = "bad-calls", "bad-calls-a1"
    spans = [
        _raw(r, a, 1, "[1, 2.5, 3]", "[4]", "c1"),  # non_integer_token
        _raw(r, a, 2, "[-3, 4]", "[4]", "c2"),  # negative_token_id
        _raw(r, a, 3, "oops", "[4]", "c3"),  # unparseable_tokens
        _raw(r, a, 4, "[1, 2]", "[True, 5]", "c4"),  # non_integer_token (response)
        _raw(r, a, 5, "[1, 2]", "[4294967296]", "c5"),  # token_id_out_of_range
        _raw(r, a, 6, "[10, 11]", "[12]", "c6"),  # good
        reward_span(r, a, 7, 0.5, 7.0),
    ]
    sc.add(r, spans, a)
    r, a = "bad-rewards", "bad-rewards-a1"
    spans = call_spans(r, a, 1, Call([1, 2, 3], [4]), 1.0)
    spans.append(
        plain_span(
            r,
            a,
            2,
            "agentlightning.annotation",
            {"agentlightning.reward.0.name": "p", "agentlightning.reward.0.value": float("nan")},
            2.0,
        )
    )
    spans += call_spans(r, a, 3, Call([5, 6], [7]), 3.0)
    spans.append(
        plain_span(
            r,
            a,
            4,
            "agentops.task",
            {"agentops.task.output": json.dumps({"type": "reward", "value": "great"})},
            4.0,
        )
    )
    spans.append(
        plain_span(
            r,
            a,
            5,
            "agentlightning.annotation",
            {"agentlightning.reward.0.name": "p", "agentlightning.reward.0.value": float("inf")},
            5.0,
        )
    )
    spans += call_spans(r, a, 6, Call([8, 9], [10]), 6.0)
    spans.append(reward_span(r, a, 7, 0.25, 7.0))
    sc.add(r, spans, a)
    r, a = "good", "good-a1"
    sc.add(r, call_spans(r, a, 1, Call([1, 2, 3, 4], [5, 6]), 1.0) + [reward_span(r, a, 2, 1.0, 2.0)], a)
    return sc


def test_bad_calls_and_rewards_are_counted_and_skipped(wh):
    sc = _bad_scenario()
    commit_collection(wh, sc.spans, rollouts=sc.rollouts(), attempts=sc.attempts)
    result = transform(wh, TransformConfig(name="bad"))
    counts = result.manifest["counts"]
    assert counts["rejected"] == {
        "non_integer_token": 2,
        "negative_token_id": 1,
        "unparseable_tokens": 1,
        "token_id_out_of_range": 1,
    }
    assert counts["rewards_rejected"] == {"non_finite_reward": 2, "non_numeric_reward": 1}
    rows = pq.read_table(result.folder / "train.parquet").to_pylist()
    assert sorted((r["input_ids"], r["reward"]) for r in rows) == sorted(
        [
            ([10, 11, 12], 0.5),
            ([1, 2, 3, 4], 0.25),
            ([5, 6, 7], 0.25),
            ([8, 9, 10], 0.25),  # the bad rewards never existed
            ([1, 2, 3, 4, 5, 6], 1.0),
        ]
    )
    # silver keeps the rejected calls with their reason, for SQL
    out = run_sql(
        wh,
        "SELECT reject_reason, count(*) AS n FROM llm_calls WHERE reject_reason IS NOT NULL "
        "GROUP BY 1 ORDER BY 1",
    ).to_pylist()
    assert {r["reject_reason"]: r["n"] for r in out} == counts["rejected"]


def test_good_spans_next_to_bad_ones_match_the_oracle(wh):
    sc = _bad_scenario()
    good = {"good"}
    commit_collection(wh, sc.spans, rollouts=sc.rollouts(), attempts=sc.attempts)
    rows = pq.read_table(transform(wh, TransformConfig(name="bad")).folder / "train.parquet").to_pylist()
    expected = oracle_rows({k: v for k, v in sc.latest_spans().items() if k in good})
    assert Counter(row_key(r) for r in rows if r["rollout_id"] in good) == Counter(map(row_key, expected))


def test_unreadable_attributes_do_not_abort(wh):
    """A span whose attributes are not JSON (a damaged collection) is skipped, not fatal."""
    from tracebank.collect import build_silver
    from tracebank.warehouse import bronze
    from tracebank.warehouse.records import CollectionManifest
    from tracebank.warehouse.storage import Storage

    from tests.fixtures.bronze import attempts_for, rollouts_for

    sc = _bad_scenario()
    dicts = [s.model_dump() for s in sc.spans]
    table = bronze.spans_table(dicts, "dmg")
    attrs = table.column("attributes").to_pylist()
    attrs[0] = "{not json"
    import pyarrow as pa

    index = table.schema.get_field_index("attributes")
    table = table.set_column(index, "attributes", pa.array(attrs, pa.string()))
    folder, storage = wh.collection_dir("dmg"), Storage(wh)
    files = [
        storage.write_table(folder, "spans-0000.parquet", table, "spans"),
        storage.write_table(
            folder, "attempts-0000.parquet", bronze.attempts_table(attempts_for(dicts), "dmg"), "attempts"
        ),
        storage.write_table(
            folder, "rollouts-0000.parquet", bronze.rollouts_table(rollouts_for(dicts), "dmg"), "rollouts"
        ),
    ]
    storage.commit_collection(folder, CollectionManifest(collection_id="dmg", files=files))
    build_silver(wh, ("dmg",))  # what `tracebank collect` does after its commit
    result = transform(wh, TransformConfig(name="dmg"))
    assert result.manifest["rows"] >= 4
